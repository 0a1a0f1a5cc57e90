"""Expected-vs-found comparisons: small records with a verdict and a message a customer can read."""
