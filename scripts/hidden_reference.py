"""What the scripts that write `tests/data/*_hidden.json` share: the command line, a right-padded batch of random
ids, the model with eager attention, and the file itself (read by `tests/src/hidden_reference.rs`).

The file holds the configuration, the ids and the mask, and the last hidden state of each sequence: at the positions
it lists under `positions`, or at every real position when it lists none.
"""

import argparse
import json

import torch
import transformers


def out_path(default):
    """The `--out FILE` argument, `default` when absent."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=default)
    return ap.parse_args().out


def padded_batch(vocab, seq, lengths, seed, low=0, pad=None):
    """`[len(lengths), seq]` ids uniform in [low, vocab) and the mask of each row's first `length` positions; the
    padded positions hold `pad` when it is given."""
    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(low, vocab, (len(lengths), seq), generator=generator)
    mask = torch.zeros(len(lengths), seq, dtype=torch.long)
    for row, length in enumerate(lengths):
        mask[row, :length] = 1
        if pad is not None:
            ids[row, length:] = pad
    return ids, mask


def eager_model(model_class, config, **kwargs):
    """`model_class(config)` in eval mode with the eager attention (the plain softmax of the scores)."""
    config._attn_implementation = "eager"
    return model_class(config, **kwargs).eval()


def write(out, made_by, config, ids, mask, hidden, positions=None, **extra):
    """The file: `extra` entries follow the configuration; `hidden` is `[batch, seq, width]`."""
    if positions is None:
        rows = [range(int(n)) for n in mask.sum(dim=1)]
    else:
        rows = [positions] * len(ids)
    doc = {
        "made_by": made_by,
        "transformers": transformers.__version__,
        "torch": torch.__version__,
        "config": config,
        **extra,
        "input_ids": ids.tolist(),
        "attention_mask": mask.tolist(),
    }
    if positions is not None:
        doc["positions"] = positions
    doc["hidden"] = [[[round(float(v), 7) for v in hidden[b, p]] for p in ps] for b, ps in enumerate(rows)]
    with open(out, "w") as f:
        json.dump(doc, f)
        f.write("\n")
