package ublk

import (
	"strings"
	"testing"
)

func TestResolveDefaults(t *testing.T) {
	m := newMemBackend(64<<20, 512)
	g, err := DeviceOptions{}.resolve(m)
	if err != nil {
		t.Fatal(err)
	}
	p := g.p
	if g.queues != 1 || g.depth != 64 || g.maxIO != 512<<10 || g.flags != deviceFlags {
		t.Errorf("geometry %+v", g)
	}
	if p.Types != paramTypeBasic|paramTypeDiscard || p.LogicalBSShift != 9 || p.PhysicalBSShift != 12 ||
		p.MaxSectors != 1024 || p.DevSectors != 64<<11 || p.Attrs != 0 {
		t.Errorf("params %+v", p)
	}
	if p.MaxDiscardSectors != DefaultMaxDiscardSectors || p.MaxWriteZeroesSectors != DefaultMaxWriteZeroesSectors ||
		p.MaxDiscardSegments != 1 || p.DiscardGranularity != 4096 {
		t.Errorf("discard params %+v", p)
	}
}

func TestResolveOptions(t *testing.T) {
	m := newMemBackend(64<<20, 4096)
	m.maxXfer = 256 << 10
	m.trim = false
	g, err := DeviceOptions{Queues: 2, QueueDepth: 128, WriteCache: true, FUA: true, NoRecovery: true,
		MaxWriteZeroesSectors: 2048}.resolve(m)
	if err != nil {
		t.Fatal(err)
	}
	p := g.p
	if g.maxIO != 256<<10 || p.MaxSectors != 512 || p.LogicalBSShift != 12 || g.flags != FlagCmdIoctlEncode {
		t.Errorf("geometry %+v", g)
	}
	if p.Attrs != attrVolatileCache|attrFUA {
		t.Errorf("attrs %#x", p.Attrs)
	}
	if p.MaxDiscardSectors != 0 || p.MaxDiscardSegments != 0 || p.MaxWriteZeroesSectors != 2048 || p.Types&paramTypeDiscard == 0 {
		t.Errorf("no trim, write zeroes only: %+v", p)
	}
	m.ro = true
	g, err = DeviceOptions{}.resolve(m)
	if err != nil || g.p.Attrs != attrReadOnly || g.p.Types != paramTypeBasic {
		t.Errorf("read-only backend: %+v %v", g.p, err)
	}
	// ReadOnly on a writable backend: UBLK_ATTR_READ_ONLY in the basic
	// params' attrs, and no discard or write-zeroes parameters.
	m.ro, m.trim = false, true
	g, err = DeviceOptions{ReadOnly: true, WriteCache: true}.resolve(m)
	if err != nil || g.p.Attrs != attrReadOnly|attrVolatileCache || g.p.Types != paramTypeBasic ||
		g.p.MaxDiscardSectors != 0 || g.p.MaxWriteZeroesSectors != 0 {
		t.Errorf("ReadOnly option: %+v %v", g.p, err)
	}
	if g, err = (DeviceOptions{}).resolve(m); err != nil || g.p.Attrs&attrReadOnly != 0 {
		t.Errorf("writable: attrs %#x %v", g.p.Attrs, err)
	}
}

func TestResolveErrors(t *testing.T) {
	for _, tc := range []struct {
		opt  DeviceOptions
		mod  func(*memBackend)
		want string
	}{
		{DeviceOptions{FUA: true}, nil, "FUA needs WriteCache"},
		{DeviceOptions{QueueDepth: 5000}, nil, "queue depth"},
		{DeviceOptions{Queues: -1}, nil, "queues"},
		{DeviceOptions{MaxDiscardSegments: 2}, nil, "discard segments"},
		{DeviceOptions{MaxDiscardSectors: 8}, func(m *memBackend) { m.trim = false }, "cannot trim"},
		{DeviceOptions{MaxIOBytes: 1024}, nil, "largest request"},
		{DeviceOptions{DiscardGranularity: 1000}, nil, "granularity"},
		{DeviceOptions{FixedID: true, ID: -3}, nil, "device id"},
		{DeviceOptions{}, func(m *memBackend) { m.bs = 8192 }, "block size"},
		{DeviceOptions{}, func(m *memBackend) { m.data = m.data[:1000] }, "multiple"},
	} {
		m := newMemBackend(1<<20, 512)
		if tc.mod != nil {
			tc.mod(m)
		}
		_, err := tc.opt.resolve(m)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want %q", tc.opt, err, tc.want)
		}
	}
}
