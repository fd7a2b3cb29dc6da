"""The engine kit: the machinery every engine plugin shares (staged lifecycle, worker, warm pages, starters, audio)."""
