"""An incentive simulation: providers with honest and cheating strategies, scored by the real oracle."""
