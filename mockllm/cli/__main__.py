"""`python -m mockllm.cli`: the `mockllm` command."""

import sys

from mockllm.cli.main import main

sys.exit(main())
