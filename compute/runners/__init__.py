"""The four job runners: train, finetune, infer, tune."""
