// Package deb is Perch's Debian packaging: the scripts and files that make
// dist/perch_<version>_<arch>.deb (build.sh, nfpm.yaml.in, the maintainer
// scripts), the signed apt repository (apt-repo.sh) and the install test in
// Debian roots (package-test.sh). version.sh numbers every build.
//
// The Go code here only tests those scripts where a test needs no root and
// no network: the version rule against dpkg's own ordering, the maintainer
// scripts' shell syntax. The slow, root-only checks (install, upgrade,
// remove, purge, apt's signature checks, lintian, piuparts) are in
// package-test.sh, which `make package-test` runs.
package deb
