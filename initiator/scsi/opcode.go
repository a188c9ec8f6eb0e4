package scsi

import "fmt"

// Opcode is the first byte of a CDB, the OPERATION CODE.
type Opcode uint8

// Operation codes this package builds (SPC-4 and SBC-4).
const (
	OpTestUnitReady          Opcode = 0x00
	OpRequestSense           Opcode = 0x03
	OpInquiry                Opcode = 0x12
	OpModeSense6             Opcode = 0x1a
	OpReadCapacity10         Opcode = 0x25
	OpRead10                 Opcode = 0x28
	OpWrite10                Opcode = 0x2a
	OpSynchronizeCache10     Opcode = 0x35
	OpUnmap                  Opcode = 0x42
	OpModeSense10            Opcode = 0x5a
	OpPersistentReserveIn    Opcode = 0x5e
	OpPersistentReserveOut   Opcode = 0x5f
	OpRead16                 Opcode = 0x88
	OpWrite16                Opcode = 0x8a
	OpSynchronizeCache16     Opcode = 0x91
	OpWriteSame16            Opcode = 0x93
	OpServiceActionIn16      Opcode = 0x9e
	OpReportLUNs             Opcode = 0xa0
	OpMaintenanceIn          Opcode = 0xa3
	saReadCapacity16         uint8  = 0x10 // SERVICE ACTION for READ CAPACITY(16)
	saReportTargetPortGroups uint8  = 0x0a // SERVICE ACTION for REPORT TARGET PORT GROUPS
)

var opcodeNames = map[Opcode]string{
	OpTestUnitReady:        "TEST UNIT READY",
	OpRequestSense:         "REQUEST SENSE",
	OpInquiry:              "INQUIRY",
	OpModeSense6:           "MODE SENSE(6)",
	OpReadCapacity10:       "READ CAPACITY(10)",
	OpRead10:               "READ(10)",
	OpWrite10:              "WRITE(10)",
	OpSynchronizeCache10:   "SYNCHRONIZE CACHE(10)",
	OpUnmap:                "UNMAP",
	OpModeSense10:          "MODE SENSE(10)",
	OpPersistentReserveIn:  "PERSISTENT RESERVE IN",
	OpPersistentReserveOut: "PERSISTENT RESERVE OUT",
	OpRead16:               "READ(16)",
	OpWrite16:              "WRITE(16)",
	OpSynchronizeCache16:   "SYNCHRONIZE CACHE(16)",
	OpWriteSame16:          "WRITE SAME(16)",
	OpServiceActionIn16:    "SERVICE ACTION IN(16)",
	OpReportLUNs:           "REPORT LUNS",
	OpMaintenanceIn:        "MAINTENANCE IN",
}

// String returns the command name as SPC-4 and SBC-4 spell it, or the
// operation code in hex when this package does not know it.
func (o Opcode) String() string {
	if s, ok := opcodeNames[o]; ok {
		return s
	}
	return fmt.Sprintf("opcode 0x%02x", uint8(o))
}
