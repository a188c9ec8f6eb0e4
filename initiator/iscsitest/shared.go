package iscsitest

import (
	"encoding/binary"
	"sort"
	"sync"

	"github.com/iser-attach/iser-attach/initiator/pdu"
	"github.com/iser-attach/iser-attach/initiator/scsi"
)

// SharedLU is one logical unit behind several target ports, for multipath
// tests: each port answers through a Handler of its own (Port) and belongs
// to a target port group whose asymmetric access state (ALUA) the test
// sets. The LU keeps what is written (512-byte blocks, immediate data
// only) so reads return it, and it models LOGICAL UNIT RESET as SAM-5
// does: every task of every I_T nexus that has not completed is aborted
// and never completes. It answers TEST UNIT READY, INQUIRY (standard with
// TPGS, VPD 0x00 and 0x83 with the LU's NAA name, the relative target port
// and the target port group), READ CAPACITY(10/16), MODE SENSE(6/10),
// SYNCHRONIZE CACHE, READ and WRITE(10/16) and REPORT TARGET PORT GROUPS.
type SharedLU struct {
	mu      sync.Mutex
	blocks  uint64
	naa     [8]byte
	alua    bool
	data    map[uint64][]byte
	groups  map[uint16]scsi.AccessState // by target port group
	ports   map[uint16]uint16           // relative target port -> group
	down    map[uint16]bool             // ports that close every connection
	nexuses map[*Target]bool            // every connection seen
	ua      map[*Target]uint8           // a 2A/xx pending per connection: its ASCQ
	resets  int
	writes  int

	// Stall, when set, is asked about every READ or WRITE on port rtp; a
	// non-nil channel holds the command (and everything after it on that
	// connection: a silent path) until it is closed. A command held across
	// a LOGICAL UNIT RESET is aborted: it neither lands nor answers.
	Stall func(rtp uint16, cdb []byte) <-chan struct{}
}

// NewSharedLU returns a LU of blocks 512-byte blocks named naa.<naa in
// hex>; with alua its INQUIRY data says implicit ALUA (TPGS 1).
func NewSharedLU(blocks, naa uint64, alua bool) *SharedLU {
	l := &SharedLU{blocks: blocks, alua: alua, data: map[uint64][]byte{},
		groups: map[uint16]scsi.AccessState{}, ports: map[uint16]uint16{}, down: map[uint16]bool{},
		nexuses: map[*Target]bool{}, ua: map[*Target]uint8{}}
	binary.BigEndian.PutUint64(l.naa[:], naa)
	l.naa[0] = 0x60 | l.naa[0]&0x0f // NAA 6
	return l
}

// SetState sets a target port group's access state; with unitAttention
// every I_T nexus gets UNIT ATTENTION 2A/06 (asymmetric access state
// changed) on its next command.
func (l *SharedLU) SetState(group uint16, st scsi.AccessState, unitAttention bool) {
	var ascq uint8
	if unitAttention {
		ascq = 0x06
	}
	l.SetStateAttention(group, st, ascq)
}

// SetStateAttention sets a target port group's access state and, unless
// ascq is 0, gives every I_T nexus UNIT ATTENTION 2A/ascq on its next
// command: 0x06 (state changed), 0x07 (an implicit transition failed,
// leaving the group in st).
func (l *SharedLU) SetStateAttention(group uint16, st scsi.AccessState, ascq uint8) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.groups[group] = st
	if ascq != 0 {
		for t := range l.nexuses {
			l.ua[t] = ascq
		}
	}
}

// SetDown makes port rtp close every connection at its next request
// (down), or serve again.
func (l *SharedLU) SetDown(rtp uint16, down bool) {
	l.mu.Lock()
	l.down[rtp] = down
	l.mu.Unlock()
}

// Block returns the data of block lba (nil if never written).
func (l *SharedLU) Block(lba uint64) []byte {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]byte(nil), l.data[lba]...)
}

// Resets counts the LOGICAL UNIT RESETs served.
func (l *SharedLU) Resets() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.resets
}

// Writes counts the WRITEs that landed.
func (l *SharedLU) Writes() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.writes
}

// Port returns the Handler of relative target port rtp, in target port
// group group (active/optimized until SetState says otherwise). It logs
// in with the default login handler.
func (l *SharedLU) Port(rtp, group uint16) Handler {
	l.mu.Lock()
	l.ports[rtp] = group
	if _, ok := l.groups[group]; !ok {
		l.groups[group] = scsi.AccessActiveOptimized
	}
	l.mu.Unlock()
	return func(t *Target, req *pdu.PDU) []Reply {
		l.mu.Lock()
		down := l.down[rtp]
		l.mu.Unlock()
		if down {
			return []Reply{{Close: true}}
		}
		switch req.BHS.Opcode() {
		case pdu.OpLoginReq:
			return t.Login(req, LoginOptions{})
		case pdu.OpSCSICommand:
			return l.command(t, rtp, req)
		case pdu.OpTaskMgmtReq:
			var r pdu.TaskMgmtRequest
			_ = r.Unmarshal(&req.BHS)
			if r.Function == pdu.TMFLogicalUnitReset {
				l.mu.Lock()
				l.resets++
				l.mu.Unlock()
			}
		}
		return t.Good(req)
	}
}

// mediaAccess says whether an opcode is refused by a group that is not
// active (SPC-4 5.16.2.4: standby and unavailable serve INQUIRY, REPORT
// TARGET PORT GROUPS and the like only).
func mediaAccess(op byte) bool {
	switch op {
	case 0x00, 0x28, 0x88, 0x2a, 0x8a, 0x35, 0x91, 0x25, 0x9e:
		return true
	}
	return false
}

func (l *SharedLU) command(t *Target, rtp uint16, req *pdu.PDU) []Reply {
	t.Ack(req)
	var c pdu.SCSICommand
	_ = c.Unmarshal(&req.BHS)
	op := c.CDB[0]
	l.mu.Lock()
	l.nexuses[t] = true
	if ascq := l.ua[t]; ascq != 0 {
		delete(l.ua, t)
		l.mu.Unlock()
		return sharedCheck(t, &c, 0x06, 0x2a, ascq)
	}
	group := l.ports[rtp]
	if st := l.groups[group]; mediaAccess(op) && !st.ServesIO() {
		l.mu.Unlock()
		switch st {
		case scsi.AccessTransitioning:
			return sharedCheck(t, &c, 0x02, 0x04, 0x0a)
		case scsi.AccessStandby:
			return sharedCheck(t, &c, 0x02, 0x04, 0x0b)
		}
		return sharedCheck(t, &c, 0x02, 0x04, 0x0c)
	}
	stall := l.Stall
	l.mu.Unlock()
	if stall != nil && (op == 0x28 || op == 0x88 || op == 0x2a || op == 0x8a) {
		if ch := stall(rtp, c.CDB[:]); ch != nil {
			l.mu.Lock()
			gen := l.resets
			l.mu.Unlock()
			<-ch
			l.mu.Lock()
			aborted := l.resets != gen
			l.mu.Unlock()
			if aborted {
				return nil
			}
		}
	}
	l.mu.Lock()
	data, sense := l.execLocked(&c, req.Data, rtp)
	l.mu.Unlock()
	if sense != nil {
		return sharedCheck(t, &c, sense[0], sense[1], sense[2])
	}
	return goodStatus(t, &c, data)
}

// execLocked runs a command; sense is key, ASC, ASCQ for CHECK CONDITION.
func (l *SharedLU) execLocked(c *pdu.SCSICommand, out []byte, rtp uint16) (data, sense []byte) {
	cdb := c.CDB[:]
	switch op := cdb[0]; op {
	case 0x00, 0x35, 0x91: // TEST UNIT READY, SYNCHRONIZE CACHE
	case 0x12: // INQUIRY
		if cdb[1]&1 == 0 {
			d := scsi.InquiryData{Version: 6, ResponseDataFormat: 2, CmdQue: true,
				Vendor: "FAKE", Product: "iscsitest shared", Revision: "0001"}
			if l.alua {
				d.TPGS = scsi.TPGSImplicit
			}
			return d.Marshal(), nil
		}
		switch cdb[2] {
		case 0x00:
			return scsi.MarshalSupportedVPDPages([]uint8{0x00, 0x83}), nil
		case 0x83:
			return l.deviceID(rtp), nil
		}
		return nil, []byte{0x05, 0x24, 0x00}
	case 0x25: // READ CAPACITY(10)
		data = make([]byte, 8)
		binary.BigEndian.PutUint32(data, uint32(l.blocks-1))
		binary.BigEndian.PutUint32(data[4:], 512)
	case 0x9e: // READ CAPACITY(16)
		data = make([]byte, 32)
		binary.BigEndian.PutUint64(data, l.blocks-1)
		binary.BigEndian.PutUint32(data[8:], 512)
	case 0x1a: // MODE SENSE(6): header only
		data = []byte{3, 0, 0, 0}
	case 0x5a: // MODE SENSE(10)
		data = []byte{0, 6, 0, 0, 0, 0, 0, 0}
	case 0xa3: // MAINTENANCE IN
		if cdb[1]&0x1f != 0x0a {
			return nil, []byte{0x05, 0x20, 0x00}
		}
		return l.portGroups(cdb[1]&0xe0 == 0x20), nil
	case 0x28, 0x88, 0x2a, 0x8a:
		var lba uint64
		var n uint32
		if op == 0x28 || op == 0x2a {
			lba, n = uint64(binary.BigEndian.Uint32(cdb[2:6])), uint32(binary.BigEndian.Uint16(cdb[7:9]))
		} else {
			lba, n = binary.BigEndian.Uint64(cdb[2:10]), binary.BigEndian.Uint32(cdb[10:14])
		}
		if lba+uint64(n) > l.blocks {
			return nil, []byte{0x05, 0x21, 0x00}
		}
		if op == 0x28 || op == 0x88 {
			data = make([]byte, int(n)*512)
			for i := range uint64(n) {
				copy(data[i*512:], l.data[lba+i])
			}
			return data, nil
		}
		if len(out) != int(n)*512 {
			return nil, []byte{0x05, 0x24, 0x00} // only immediate data is taken
		}
		for i := range uint64(n) {
			l.data[lba+i] = append([]byte(nil), out[i*512:(i+1)*512]...)
		}
		l.writes++
	default:
		return nil, []byte{0x05, 0x20, 0x00}
	}
	return data, nil
}

// deviceID is VPD page 0x83 as seen through port rtp.
func (l *SharedLU) deviceID(rtp uint16) []byte {
	port := []byte{0, 0, byte(rtp >> 8), byte(rtp)}
	g := l.ports[rtp]
	group := []byte{0, 0, byte(g >> 8), byte(g)}
	id := scsi.DeviceIdentification{Designators: []scsi.Designator{
		{CodeSet: scsi.CodeSetBinary, Association: scsi.AssocLogicalUnit, Type: scsi.DesignatorNAA, Value: l.naa[:]},
		{CodeSet: scsi.CodeSetBinary, Association: scsi.AssocTargetPort, Type: scsi.DesignatorRelativeTargetPort, Value: port},
		{CodeSet: scsi.CodeSetBinary, Association: scsi.AssocTargetPort, Type: scsi.DesignatorTargetPortGroup, Value: group},
	}}
	return id.Marshal()
}

// portGroups is REPORT TARGET PORT GROUPS' parameter data.
func (l *SharedLU) portGroups(extended bool) []byte {
	var ids []int
	for g := range l.groups {
		ids = append(ids, int(g))
	}
	sort.Ints(ids)
	tpgs := scsi.TargetPortGroups{Extended: extended}
	for _, g := range ids {
		tg := scsi.TargetPortGroup{ID: uint16(g), State: l.groups[uint16(g)], SupportsOptimized: true,
			SupportsNonOptimized: true, SupportsStandby: true, SupportsUnavailable: true, SupportsTransitioning: true}
		var ports []int
		for p, pg := range l.ports {
			if pg == uint16(g) {
				ports = append(ports, int(p))
			}
		}
		sort.Ints(ports)
		for _, p := range ports {
			tg.Ports = append(tg.Ports, uint16(p))
		}
		tpgs.Groups = append(tpgs.Groups, tg)
	}
	b := tpgs.Marshal()
	if extended {
		// As Linux's LIO answers (target_core_alua.c): the RETURN DATA
		// LENGTH of the extended format leaves the extended header's 4
		// bytes out, and the transfer is cut to that length + 4, so the
		// last 4 bytes (the last group's last port) never arrive.
		binary.BigEndian.PutUint32(b[0:4], uint32(len(b)-8))
		b = b[:len(b)-4]
	}
	return b
}

// sharedCheck answers CHECK CONDITION with fixed-format sense.
func sharedCheck(t *Target, c *pdu.SCSICommand, key, asc, ascq byte) []Reply {
	return (*LU)(nil).check(t, c, key, asc, ascq)
}
