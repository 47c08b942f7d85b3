"""python -m pgjobq: the pgjobq command line."""

from pgjobq._cli import main

main()
