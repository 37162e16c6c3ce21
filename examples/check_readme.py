"""The README shows examples/mlp.c verbatim: fail if they have drifted apart."""
import sys

readme, example = (open(p, encoding="utf-8").read() for p in sys.argv[1:3])
if example.rstrip() + "\n```" not in readme:
    print("README.md no longer holds examples/mlp.c verbatim: paste the file into its ```c block")
    sys.exit(1)
print("README.md shows examples/mlp.c verbatim")
