"""`python -m mockllm`: the `mockllm` command."""

import sys

from mockllm.cli import main

sys.exit(main())
