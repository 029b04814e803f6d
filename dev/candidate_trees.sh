#!/usr/bin/env bash
# candidate_trees.sh — source trees under build/ab for dev/tree_ab.sh or dev/refs_session.sh,
# made here (no GPU): build/ab/main from main, and build/ab/<name> from main plus
# dev/candidates/<name>.patch for each NAMES word; a word a+b stacks patch b on patch a
# (build/ab/a+b). Carry build/ab to the device.
#   NAMES="a b a+c" bash dev/candidate_trees.sh
set -eu
rm -rf build/ab
mkdir -p build/ab/main
git archive main | tar -x -C build/ab/main
for name in ${NAMES:?NAMES="name[+name] ..."}; do
  mkdir -p "build/ab/$name"
  git archive main | tar -x -C "build/ab/$name"
  for p in ${name//+/ }; do
    patch -s -d "build/ab/$name" -p1 < "dev/candidates/$p.patch" # not git apply: inside this
    # repository it would skip the paths outside build/ab/<name>
  done
done
ls build/ab
