"""Stage 4, model: the tensor language model (TLM), from random sentences to a model that knows
what is fast.

sentences --pretrain--> TLM-base;  Records --demos--> demonstrations --finetune--> TLM;
TLM + Task --generate--> valid programs (constrained decoding)

- lm.py         word-level tokenizer, GPT-2 presets, safe save/load, the shipped models
- pretrain.py   resumable pretraining on sampled sentences (TLM-base)
- demos.py      demonstrations (the best measured programs) from the database, tokens and masks
- finetune.py   supervised fine-tuning from TLM-base, in-process or as a background job
- generate.py   batched constrained generation with a shared KV cache
"""
