"""What preparing a model says it is doing, in the words the CLI prints and editors show while
the first completion waits (Engine.prepare's report)."""

LOADING = "loading the model"
MEASURING = "measuring this machine's model passes (once per machine and model, a few seconds)"
INDEXING_VOCABULARY = "indexing the vocabulary for token healing"
