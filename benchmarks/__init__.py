"""sqldelay's benchmark suite: our figures beside reference runs measured in the same run.

Run ``python -m benchmarks --url URL`` from a source checkout (not part of the installed
package: ``sqldelay bench`` only says so).
Every figure of ours stands next to a ceiling or peer figure taken on the same machine in the
same run, because absolute numbers on a shared development machine say little; see README.md.
"""
