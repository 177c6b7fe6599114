"""`python -m mockllm`: the `mockllm` command."""

import sys

from mockllm.cli.main import main

sys.exit(main())
