# Perch build. `make run` and `make test` are the two set-up commands; both
# install what they need on a fresh machine.
SHELL := /bin/bash
GO    ?= go
PKG   := github.com/perchhq/perch
STEP  := .ci/step

# The release number is in VERSION; image/deb/version.sh says how builds
# between releases are numbered (X.Y.Z~git<yyyymmdd>.<hash>).
VERSION    ?= $(shell image/deb/version.sh)
COMMIT     ?= $(shell git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
BUILD_TIME ?= $(shell date -u +%Y-%m-%dT%H:%M:%SZ)
LDFLAGS    := -s -w -X $(PKG)/appliance/version.Version=$(VERSION) \
              -X $(PKG)/appliance/version.Commit=$(COMMIT) \
              -X $(PKG)/appliance/version.BuildTime=$(BUILD_TIME)
GOBUILD    := CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)'

# Where `make run` keeps its config, workspace and database.
# make run keeps its home in the clone, unless PERCH_HOME names one: the
# commands run beside it in the same shell then read the same home.
RUN_HOME ?= $(or $(PERCH_HOME),$(CURDIR)/.perch)

.PHONY: all build run test deps lint vet staticcheck fmt-check unit cross cross-cgo qemu-test fuzz bench pgo clean deb apt-repo package-test image image-test

all: build

build:
	$(GOBUILD) -o bin/perch ./cmd/perch

run: build
	@if [ ! -f "$(RUN_HOME)/config.json" ]; then PERCH_HOME="$(RUN_HOME)" PERCH_GATEWAY_HOST=127.0.0.1 bin/perch onboard; fi
	PERCH_HOME="$(RUN_HOME)" PERCH_GATEWAY_HOST=127.0.0.1 PERCH_SHOW_TOKEN=1 bin/perch gateway

test:
	@$(STEP) deps .ci/deps
	@$(STEP) lint $(MAKE) --no-print-directory lint
	@$(STEP) "go test -race" .ci/gotest
	@$(STEP) cross $(MAKE) --no-print-directory cross
	@$(STEP) cross-cgo $(MAKE) --no-print-directory cross-cgo
	@$(STEP) "drivers under qemu" .ci/qemu-test
	@$(STEP) fuzz $(MAKE) --no-print-directory fuzz

deps:
	.ci/deps

lint: fmt-check vet staticcheck

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt needed on:"; echo "$$out"; exit 1; fi

vet:
	$(GO) vet ./...

staticcheck:
	$(GO) tool -modfile=gotools/go.mod staticcheck ./...

unit:
	.ci/gotest

# Stripped, static builds for the boards. armv6 runs on every Pi (Zero/1
# included), so the armhf .deb carries it.
cross:
	@mkdir -p dist
	GOOS=linux GOARCH=amd64 $(GOBUILD) -o dist/perch_linux_amd64 ./cmd/perch
	GOOS=linux GOARCH=arm64 $(GOBUILD) -o dist/perch_linux_arm64 ./cmd/perch
	GOOS=linux GOARCH=arm GOARM=7 $(GOBUILD) -o dist/perch_linux_armv7 ./cmd/perch
	GOOS=linux GOARCH=arm GOARM=6 $(GOBUILD) -o dist/perch_linux_armv6 ./cmd/perch
	@ls -l dist/perch_linux_*

# The libudev builds (-tags udev, cgo) with Debian's cross compilers, for
# boards running Debian bookworm or later (glibc >= 2.36). .ci/deps-cgo
# installs the compilers and unpacks libudev for each architecture into
# build/sysroot/<arch> (no multiarch packages on the host). armv6 has none:
# Debian's armhf toolchain emits ARMv7 code, so the Pi Zero/1 run the static
# armv6 build with the pure-Go netlink listener. .ci/udev-test then runs
# drivers/usb's tests with -tags udev on each architecture (arm under qemu).
SYSROOT  := $(CURDIR)/build/sysroot
CGOBUILD := CGO_ENABLED=1 $(GO) build -trimpath -tags udev -ldflags '$(LDFLAGS)'
cgoflags  = CGO_CFLAGS="-I$(SYSROOT)/$(1)/usr/include" CGO_LDFLAGS="-L$(SYSROOT)/$(1)/usr/lib/$(2)"
cross-cgo:
	@.ci/deps-cgo
	@mkdir -p dist
	GOOS=linux GOARCH=amd64 CC=gcc $(call cgoflags,amd64,x86_64-linux-gnu) $(CGOBUILD) -o dist/perch_linux_amd64_udev ./cmd/perch
	GOOS=linux GOARCH=arm64 CC=aarch64-linux-gnu-gcc $(call cgoflags,arm64,aarch64-linux-gnu) $(CGOBUILD) -o dist/perch_linux_arm64_udev ./cmd/perch
	GOOS=linux GOARCH=arm GOARM=7 CC=arm-linux-gnueabihf-gcc $(call cgoflags,armhf,arm-linux-gnueabihf) $(CGOBUILD) -o dist/perch_linux_armv7_udev ./cmd/perch
	SYSROOT=$(SYSROOT) .ci/udev-test
	@ls -l dist/perch_linux_*_udev

# The drivers' tests as arm64 and armv6 (Pi Zero CPU) binaries under qemu-user.
qemu-test:
	.ci/qemu-test

# Short fuzz runs of every Fuzz target (10s each); FUZZTIME=1m for longer.
FUZZTIME ?= 10s
fuzz:
	@GO="$(GO)" FUZZTIME="$(FUZZTIME)" .ci/fuzz

# Flashable images (image/IMAGE.md): dist/perch-<version>-rpi-arm64.img.xz
# (Raspberry Pi 3, 4, 400, Zero 2 W) and dist/perch-<version>-amd64.img.xz
# (UEFI PCs), each with a .manifest. Input: Perch's .deb for each
# architecture, $(IMAGE_DEB_DIR)/perch_$(VERSION)_<arch>.deb (make deb).
# The images trust Perch's signed apt repository at IMAGE_APT_URL (where
# dist/apt is served) with the public key IMAGE_APT_KEY (make apt-repo
# writes it); without both they are built without the repository, and say
# so. Debian trees are cached in /var/cache/perch-build (IMAGE_REFRESH=1
# rebuilds them).
IMAGE_TARGETS ?= rpi-arm64 amd64
IMAGE_DEB_DIR ?= dist
IMAGE_APT_URL ?=
IMAGE_APT_KEY ?= dist/apt/perch-archive-keyring.gpg
image:
	@.ci/image-deps
	@for t in $(IMAGE_TARGETS); do \
	  case $$t in rpi-arm64) a=arm64 ;; amd64) a=amd64 ;; *) echo "image: unknown target $$t" >&2; exit 1 ;; esac; \
	  deb=$(IMAGE_DEB_DIR)/perch_$(VERSION)_$$a.deb; \
	  [ -f "$$deb" ] || { echo "image: $$deb is missing: run 'make deb' first (or set IMAGE_DEB_DIR)" >&2; exit 1; }; \
	  repo=; [ -n "$(IMAGE_APT_URL)" ] && repo="--apt-url $(IMAGE_APT_URL) --apt-key $(IMAGE_APT_KEY)"; \
	  $(STEP) "image $$t" image/build.sh --target $$t --deb "$$deb" --out dist $$repo || exit 1; \
	done

# Builds the images with test settings and boots them in QEMU (image/imagetest).
image-test:
	image/image-test.sh

bench: build
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags "-s -w" -o bin/perch-floor ./bench/floor
	$(GO) test -run '^$$' -bench . -benchmem ./store/ ./appliance/...
	$(GO) run ./bench/load -bin bin/perch -floor bin/perch-floor

# cmd/perch/default.pgo, the CPU profile every build of perch is optimised
# with (Go's profile-guided optimisation: hot calls inlined, hot interface
# calls devirtualised): a build with the pgoprofile tag records itself
# through the bench's turns at c=1 and c=16 and its restarts. Run it again
# after changing a turn's path, and commit the new profile.
pgo:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags "-s -w" -o bin/perch-floor ./bench/floor
	CGO_ENABLED=0 $(GO) build -trimpath -tags pgoprofile -ldflags "-s -w" -o bin/perch-profiling ./cmd/perch
	rm -rf build/pgo && mkdir -p build/pgo
	PERCH_CPUPROFILE=$(CURDIR)/build/pgo/cpu $(GO) run ./bench/load -bin bin/perch-profiling -floor bin/perch-floor -only start -n1 4000 -n16 40000
	$(GO) tool pprof -proto build/pgo/cpu.* > build/pgo/merged.pgo
	mv build/pgo/merged.pgo cmd/perch/default.pgo
	@ls -l cmd/perch/default.pgo

clean:
	rm -rf bin dist

# Debian packages: dist/perch_<version>_<arch>.deb for DEB_ARCHES, each
# with its static build (armhf carries armv6, which runs on every Pi).
# Layout, maintainer scripts and the version rule: image/deb/.
DEB_ARCHES ?= amd64 arm64 armhf
deb: build
	@test -n "$(VERSION)" || { echo "deb: no version: image/deb/version.sh failed (see above)" >&2; exit 1; }
	@mkdir -p dist
	@for a in $(DEB_ARCHES); do \
	  case $$a in \
	    amd64) goenv="GOARCH=amd64" out=amd64 ;; \
	    arm64) goenv="GOARCH=arm64" out=arm64 ;; \
	    armhf) goenv="GOARCH=arm GOARM=6" out=armv6 ;; \
	    *) echo "deb: unknown architecture $$a (amd64, arm64, armhf)" >&2; exit 1 ;; \
	  esac; \
	  echo "build dist/perch_linux_$$out"; \
	  env GOOS=linux $$goenv $(GOBUILD) -o dist/perch_linux_$$out ./cmd/perch || exit 1; \
	done
	image/deb/build.sh '$(VERSION)' $(DEB_ARCHES)

# A signed apt repository in APT_DIR holding the packages of this version
# (and every version published there before). PERCH_REPO_KEY: the armored
# private signing key; unset, a throwaway key kept in build/apt-key/.
APT_DIR ?= dist/apt
apt-repo: deb
	image/deb/apt-repo.sh $(APT_DIR) $(foreach a,$(DEB_ARCHES),dist/perch_$(VERSION)_$(a).deb)

# Install, upgrade, remove and purge from the signed repository in Debian
# roots (trixie, bookworm, arm64), lintian and piuparts. Needs root.
package-test:
	image/deb/package-test.sh
