# iser-attach: few, obvious targets. `make test` is what CI runs.
GO       ?= go
FUZZTIME ?= 100000x
BIN      := bin

.PHONY: all build build-nocgo test-bins vet unit fuzz e2e e2e-7 test demo bench-tcp bench-multipath-tcp bench-vm clean deb deb-check test-deps demo-deps soak e2e-multipath

# The version the binary reports (iser-attach version) and the package carries: the VERSION
# file, else git describe. REVISION is for builds Go cannot stamp with vcs.revision (worktrees).
VERSION  ?= $(shell cat VERSION 2>/dev/null || git describe --always --dirty 2>/dev/null || echo unknown)
REVISION ?= $(shell r=$$(git rev-parse HEAD 2>/dev/null) && { git diff --quiet HEAD 2>/dev/null || r=$$r-dirty; echo $$r; })
LDFLAGS  := -X main.version=$(VERSION) -X main.revision=$(REVISION)

all: build

# The real binary links rdma-core at run time (dlopen), so it starts on hosts
# without it; build-nocgo proves everything outside rdma/ builds without cgo.
build:
	CGO_ENABLED=1 $(GO) build -buildvcs=auto -ldflags '$(LDFLAGS)' -o $(BIN)/iser-attach ./cmd/iser-attach

build-nocgo:
	CGO_ENABLED=0 $(GO) build -buildvcs=auto -ldflags '$(LDFLAGS)' -o $(BIN)/iser-attach-nocgo ./cmd/iser-attach

# Test binaries the VM lab runs in the guest.
test-bins:
	CGO_ENABLED=1 $(GO) test -c -o $(BIN)/rdma.test ./rdma/
	CGO_ENABLED=1 $(GO) test -c -o $(BIN)/initiator.test ./initiator/
	CGO_ENABLED=0 $(GO) test -c -o $(BIN)/ublk.test ./ublk/
	CGO_ENABLED=0 $(GO) test -c -o $(BIN)/nbdkernel.test ./nbd/kernel/
	CGO_ENABLED=0 $(GO) build -o $(BIN)/ublkmem ./ublk/cmd/ublkmem
	CGO_ENABLED=0 $(GO) test -c -o $(BIN)/csi.test ./csi/
	CGO_ENABLED=0 GOBIN=$(abspath $(BIN)) $(GO) install github.com/kubernetes-csi/csi-test/v5/cmd/csi-sanity@v5.4.0

vet:
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { gofmt -l $$(git ls-files '*.go'); echo "gofmt needed"; exit 1; }
	CGO_ENABLED=0 $(GO) vet ./...
	CGO_ENABLED=1 $(GO) vet ./rdma/...

# Unit tests, codec tests and the integration tests against a real tgtd.
unit:
	$(GO) test -race -count=1 ./...
	# The fast-path guard: fails when a read allocates or changes goroutine more than once.
	$(GO) test -run '^$$' -bench 'FastPath' -benchtime=1x ./initiator/

# Every go test -fuzz target, briefly, from its seed corpus on (FUZZTIME: executions per
# target, or a duration such as 4s; scripts/fuzz-short.sh says why a count).
fuzz:
	scripts/fuzz-short.sh $(FUZZTIME)

# The VM lab's guest kernel: a NAME of scripts/vmlab/kernels.conf, which pins each kernel's
# Debian packages (6.12: bookworm-security; 7.2, or 7: unstable). make e2e VMLAB_KERNEL=7.2
VMLAB_KERNEL ?= $(or $(ISER_VMLAB_KERNEL),6.12)

# The VM lab: soft-RoCE, LIO with iSER, the kernel initiators, nbd, ublk; its systemd boot
# installs the package (deb). ISER_VMLAB_TESTS=90-systemd-fstab runs that boot alone.
e2e: build build-nocgo test-bins deb
	ISER_VMLAB_KERNEL=$(VMLAB_KERNEL) ISER_VMLAB_NOBUILD=1 scripts/vmlab/vmlab.sh e2e

# The compact suite on the 7.x guest (kernels.conf's line 7.*): the lab's baseline (00, 10,
# 20), ublk and NBD cycles (70, 71), recovery (73), the interop row of LIO over iSER with mutual
# CHAP (79), SIGTERM takeover in 6 cycles (81), online resize (83-ublk-resize:
# UBLK_F_UPDATE_SIZE), multipath's path faults (84, about 200 s), the CSI node (85); then quick figures: bench's kernel ib_iser, ublk and NBD over iSER, 2 s
# per workload, three workloads, with and without UBLK_F_BATCH_IO, and the daemon's system calls
# per I/O at QD1 and QD32 (not the goals' measurement: make bench-vm VMLAB_KERNEL=7.2 is).
# The soak (80) runs on 6.12 only: its daemon-term fault is 81's SIGTERM takeover.
E2E7_TESTS ?= 00-* 10-* 20-* 70-* 71-* 73-* 79-* 81-* 83-ublk-resize.sh 84-multipath.sh 85-csi-node.sh
E2E7_WORKLOADS ?= 4k-randread-qd32:randread:4k:32 4k-randwrite-qd32:randwrite:4k:32 \
	4k-randread-qd1:randread:4k:1
e2e-7: build build-nocgo test-bins
	ISER_VMLAB_KERNEL=7 ISER_VMLAB_NOBUILD=1 ISER_VMLAB_TESTS='$(E2E7_TESTS)' \
		VMLAB_INTEROP_CELLS='LIO:iser:mutual:*' VMLAB_SIGTERM_CYCLES=6 scripts/vmlab/vmlab.sh e2e
	ISER_VMLAB_KERNEL=7 ISER_VMLAB_NOBUILD=1 ISER_VMLAB_TESTS='10-* 50-*' VMLAB_FIO_SECONDS=2 VMLAB_SYSCALL_SECONDS=2 \
		VMLAB_WORKLOADS='$(E2E7_WORKLOADS)' scripts/vmlab/vmlab.sh bench

# The VM lab's multipath test alone (tests/84-multipath.sh, about 4 min): one LUN behind two
# LIO TPGs in two ALUA groups, faults on a two-path volume (e2e runs it too).
e2e-multipath: build build-nocgo test-bins
	ISER_VMLAB_KERNEL=$(VMLAB_KERNEL) ISER_VMLAB_NOBUILD=1 ISER_VMLAB_TESTS='84-*' scripts/vmlab/vmlab.sh e2e

# The VM lab's soaks: tests/80-soak.sh, SOAK_FAULTS random faults on two volumes (e2e runs 8;
# VMLAB_SOAK_SEED=N repeats a run's order, VMLAB_SOAK_KINDS picks fault kinds); then, in a boot
# of its own, tests/84-multipath.sh's path-fault soak, SOAK_FAULTS path faults on a two-path
# volume (VMLAB_MP_SOAK_SEED=N repeats its order). SOAK_PARTS=80 or 84 runs one of them.
SOAK_FAULTS ?= 50
SOAK_PARTS ?= 80 84
soak: build build-nocgo test-bins
	case ' $(SOAK_PARTS) ' in *' 80 '*) \
	ISER_VMLAB_KERNEL=$(VMLAB_KERNEL) ISER_VMLAB_NOBUILD=1 ISER_VMLAB_TESTS='80-*' VMLAB_SOAK_FAULTS=$(SOAK_FAULTS) \
		VMLAB_TEST_TIMEOUT=$$(( $(SOAK_FAULTS) * 45 + 240 )) \
		ISER_VMLAB_TIMEOUT=$$(( $(SOAK_FAULTS) * 45 + 420 )) scripts/vmlab/vmlab.sh e2e ;; esac
	case ' $(SOAK_PARTS) ' in *' 84 '*) \
	ISER_VMLAB_KERNEL=$(VMLAB_KERNEL) ISER_VMLAB_NOBUILD=1 ISER_VMLAB_TESTS='84-multipath.sh' \
		VMLAB_MP_SOAK_FAULTS=$(SOAK_FAULTS) VMLAB_TEST_TIMEOUT=$$(( $(SOAK_FAULTS) * 60 + 240 )) \
		ISER_VMLAB_TIMEOUT=$$(( $(SOAK_FAULTS) * 60 + 420 )) scripts/vmlab/vmlab.sh e2e ;; esac

# No build output in git (scripts/repo-check.sh: no tracked ELF file, none over 1 MiB), then
# the packages the tests need (scripts/deps.sh: installs only what is missing), then the
# shell tools' host tests (seconds; script-tests below).
test: repo-check test-deps script-tests vet build-nocgo deb-check unit fuzz e2e e2e-7

test-deps:
	scripts/deps.sh test

demo-deps:
	scripts/deps.sh demo

demo: demo-deps
	scripts/demo.sh

bench-tcp:
	scripts/bench-tcp.sh

bench-multipath-tcp:
	scripts/bench-multipath-tcp.sh

bench-vm: build test-bins
	ISER_VMLAB_KERNEL=$(VMLAB_KERNEL) ISER_VMLAB_NOBUILD=1 scripts/vmlab/vmlab.sh bench

clean:
	rm -rf $(BIN)

# Install: bin/iser-attach and iser-fstab into $(PREFIX)/sbin, the systemd units into
# $(PREFIX)/lib/systemd/system (on systemd's unit path), the udev rule, /etc/iser-attach/volumes/;
# without DESTDIR also daemon-reload and enable iser-attach.target. See docs/operations.md.
PREFIX  ?= /usr/local
DESTDIR ?=

.PHONY: install uninstall script-tests repo-check

install: build
	DESTDIR="$(DESTDIR)" PREFIX="$(PREFIX)" scripts/install.sh install $(BIN)/iser-attach

uninstall:
	DESTDIR="$(DESTDIR)" PREFIX="$(PREFIX)" scripts/install.sh uninstall

# Host tests of the shell tools (seconds, no root needed): iser-fstab, install.sh, deps.sh,
# the vmlab bench helpers and table.
script-tests:
	scripts/iser-fstab-test.sh
	scripts/install-test.sh
	scripts/deps-test.sh
	scripts/vmlab/bench-test.sh
	scripts/vmlab/faults-test.sh
	scripts/vmlab/lock-test.sh
	scripts/repo-check-test.sh
	scripts/fuzz-short-test.sh

# The Debian package, offline from the tree (scripts/deb/build.sh): a hardened (PIE, full
# RELRO), stripped cgo build, its man page and completions, the units, udev rule, maintainer
# scripts.
deb:
	CGO_ENABLED=1 $(GO) build -buildvcs=auto -buildmode=pie -trimpath \
		-ldflags '$(LDFLAGS) -s -w -extldflags=-Wl,-z,relro,-z,now' -o $(BIN)/deb/iser-attach ./cmd/iser-attach
	rm -f $(BIN)/iser-attach_*.deb
	scripts/deb/build.sh $(BIN)/deb/iser-attach '$(VERSION)' $(BIN)

# lintian (no errors) and the package's contents and maintainer scripts (scripts/deb/check.sh).
deb-check: deb
	scripts/deb/check.sh $(BIN)/iser-attach_*.deb

# Fails when git tracks an ELF file or a file over 1 MiB (a build output committed by mistake).
repo-check:
	scripts/repo-check.sh
