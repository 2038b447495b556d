import sys

from .cli.flags import main

sys.exit(main())
