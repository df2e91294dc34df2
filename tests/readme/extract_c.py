#!/usr/bin/env python3
"""Write the README's C snippet (its first ```c block), exactly as written,
to a .c file the build compiles. Usage: extract_c.py README.md out.c"""
import sys

text = open(sys.argv[1]).read()
start = text.index("```c\n") + len("```c\n")
end = text.index("```", start)
with open(sys.argv[2], "w") as f:
    f.write(text[start:end])
