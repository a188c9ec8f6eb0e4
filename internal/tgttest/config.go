package tgttest

import (
	"fmt"
	"io"
	"regexp"
)

// DefaultLUNSize is the size of a LUN whose Size and Path are both unset.
const DefaultLUNSize = 64 << 20

// LUN describes one backing-store logical unit. Target.LUNs[i] becomes SCSI
// LUN i+1: tgt reserves LUN 0 for its controller device (peripheral type
// 0x0c, no storage).
type LUN struct {
	// Size in bytes; a multiple of BlockSize. Zero means DefaultLUNSize, or
	// the existing size of Path.
	Size int64
	// BlockSize is the logical block size, 512 (default) or 4096.
	BlockSize int
	// Path is the backing file. Empty: a sparse file in the server's
	// directory. A Path that does not exist is created; one shorter than
	// Size is extended (sparse), never shrunk.
	Path string
	// ThinProvisioning sets thin_provisioning=1: tgt then advertises
	// LBPU/LBPWS, accepts UNMAP and WRITE SAME with UNMAP, and punches holes
	// in the backing file (fallocate PUNCH_HOLE).
	ThinProvisioning bool
	// ReadOnly sets readonly=1: the LUN reports WP in MODE SENSE and fails
	// writes with DATA PROTECT / WRITE PROTECTED.
	ReadOnly bool
}

// CHAP is one CHAP account (tgtadm --mode account).
type CHAP struct{ User, Secret string }

// Target describes one iSCSI target.
type Target struct {
	// IQN is the target name; empty means iqn.2024-01.io.iser-attach.test:tN
	// where N is the 1-based position among the Config's targets.
	IQN string
	// LUNs are the backing-store LUNs, numbered from 1. Nil means one LUN
	// of DefaultLUNSize.
	LUNs []LUN
	// CHAP, when set, makes the initiator authenticate with this account
	// (one-way CHAP; tgt's incoming account).
	CHAP *CHAP
	// Mutual, when set, is the account the target answers with when the
	// initiator asks it to authenticate (tgt's --outgoing account). It
	// needs CHAP. tgt does not insist on mutual authentication: an
	// initiator that does not send CHAP_I/CHAP_C logs in with CHAP alone.
	Mutual *CHAP
}

// Config is everything Launch needs.
type Config struct {
	Targets []Target
	// Dir holds the backing files and tgtd's output; it must exist.
	// Empty means a new directory under os.TempDir, removed by Close.
	Dir string
	// Trace runs tgtd with -d 1 and parses its debug log so that Commands
	// and Sync work. It costs some CPU per command: leave it off for
	// benchmarks.
	Trace bool
	// Log, if set, receives every line tgtd prints (trace lines included).
	Log io.Writer
}

var iqnRE = regexp.MustCompile(`^(iqn\.[0-9]{4}-[0-9]{2}\.[a-z0-9.-]+(:.+)?|eui\.[0-9A-Fa-f]{16}|naa\.[0-9A-Fa-f]{16,32})$`)

// normalize fills in defaults and checks the configuration.
func (c *Config) normalize() error {
	if len(c.Targets) == 0 {
		c.Targets = []Target{{}}
	}
	seen := map[string]bool{}
	accounts := map[string]string{}
	for i := range c.Targets {
		t := &c.Targets[i]
		if t.IQN == "" {
			t.IQN = fmt.Sprintf("iqn.2024-01.io.iser-attach.test:t%d", i+1)
		}
		if !iqnRE.MatchString(t.IQN) {
			return fmt.Errorf("target %d: %q is not an iSCSI name (RFC 3720 3.2.6.3)", i+1, t.IQN)
		}
		if seen[t.IQN] {
			return fmt.Errorf("target %d: duplicate name %s", i+1, t.IQN)
		}
		seen[t.IQN] = true
		if t.LUNs == nil {
			t.LUNs = []LUN{{}}
		}
		t.LUNs = append([]LUN(nil), t.LUNs...)
		for j := range t.LUNs {
			l := &t.LUNs[j]
			if l.BlockSize == 0 {
				l.BlockSize = 512
			}
			if l.BlockSize != 512 && l.BlockSize != 4096 {
				return fmt.Errorf("%s LUN %d: block size %d: want 512 or 4096", t.IQN, j+1, l.BlockSize)
			}
			if l.Size == 0 && l.Path == "" {
				l.Size = DefaultLUNSize
			}
			if l.Size < 0 || l.Size%int64(l.BlockSize) != 0 {
				return fmt.Errorf("%s LUN %d: size %d is not a multiple of %d", t.IQN, j+1, l.Size, l.BlockSize)
			}
		}
		if t.Mutual != nil && t.CHAP == nil {
			return fmt.Errorf("%s: mutual CHAP needs CHAP", t.IQN)
		}
		for _, a := range []*CHAP{t.CHAP, t.Mutual} {
			if a == nil {
				continue
			}
			if a.User == "" || a.Secret == "" {
				return fmt.Errorf("%s: CHAP account needs a user and a secret", t.IQN)
			}
			if s, ok := accounts[a.User]; ok && s != a.Secret {
				return fmt.Errorf("%s: CHAP user %q has two different secrets", t.IQN, a.User)
			}
			accounts[a.User] = a.Secret
		}
	}
	return nil
}
