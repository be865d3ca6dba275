"""Writes a small Hugging Face text classifier and a table of texts to train and serve it on, offline:
a GPT-2 (or BERT) sequence classifier with a word-level tokenizer, saved with
`save_pretrained` (compute.hf.make_tiny), and short film reviews with their `label`
(compute.data.write_reviews). With access to a model hub, save a hub model instead:
`AutoModelForSequenceClassification.from_pretrained(name).save_pretrained("model")` and the
same for its tokenizer.

    python examples/reviews/prepare.py [gpt2|bert]   # writes model/ and reviews.parquet here

Then post any of the three specs beside it: train.yaml (every weight, with Ray Train),
finetune.yaml (LoRA adapters through peft) or infer.yaml (batch inference), e.g.
`swarm job post examples/reviews/train.yaml --upload-to s3://BUCKET/PATH?endpoint_override=…`.
"""

import sys
from pathlib import Path

from compute import hf
from compute.data import write_reviews

if __name__ == "__main__":
    here = Path(__file__).parent
    table = write_reviews(here / "reviews.parquet", seed=0, n=400)
    architecture = sys.argv[1] if len(sys.argv) > 1 else "gpt2"
    model = hf.make_tiny(here / "model", hf.texts(table)[0], classes=2, architecture=architecture)
    print(f"wrote {model} ({architecture}) and {table}")
