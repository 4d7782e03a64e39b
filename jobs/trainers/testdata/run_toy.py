"""train_sft.main with the toy model in place of transformers (and peft), as a
process of its own: the tests start it once per rank (the WORLD_SIZE,
RANK and MASTER_* variables torchrun would set) and kill it mid-run."""

import faulthandler
import os
import signal
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.dirname(HERE)]

import fake_peft  # noqa: E402
import fake_transformers  # noqa: E402

sys.modules["transformers"] = fake_transformers
sys.modules["peft"] = fake_peft

import train_sft  # noqa: E402

if __name__ == "__main__":
    # A test that gives up on a hung rank asks it where it is.
    faulthandler.register(signal.SIGUSR1)
    train_sft.main()
