"""`python -m hypnos.hosting FD ASK_FD`: an engine host process (started by the server, never by hand)."""

import sys

from hypnos.hosting.host import main

main(sys.argv)
