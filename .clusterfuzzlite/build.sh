#!/bin/bash -eu
# Builds ilcheck's cargo-fuzz targets (fuzz/fuzz_targets) for ClusterFuzzLite / OSS-Fuzz and
# copies them, with their seed corpora from corpus/regressions, to $OUT. CARGO_FUZZ_ARGS adds
# options (e.g. `-s none` to try the build on a stable toolchain).
cd "$SRC/ilcheck"
cargo fuzz build -O ${CARGO_FUZZ_ARGS:-}
targets=$(sed -n 's/^name = "\(.*\)"$/\1/p' fuzz/Cargo.toml | grep -v '^ilcheck-fuzz$')
for t in $targets; do
    cp "fuzz/target/x86_64-unknown-linux-gnu/release/$t" "$OUT/"
    if [ -d "corpus/regressions/$t" ]; then
        (cd "corpus/regressions/$t" && zip -q -r "$OUT/${t}_seed_corpus.zip" .)
    fi
done
