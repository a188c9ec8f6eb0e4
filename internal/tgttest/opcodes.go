package tgttest

// SCSI operation codes (SPC-4, SBC-3) worth counting in tests.
const (
	OpTestUnitReady      byte = 0x00
	OpInquiry            byte = 0x12
	OpModeSense6         byte = 0x1a
	OpReadCapacity10     byte = 0x25
	OpRead10             byte = 0x28
	OpWrite10            byte = 0x2a
	OpSynchronizeCache10 byte = 0x35
	OpWriteSame10        byte = 0x41
	OpUnmap              byte = 0x42
	OpRead16             byte = 0x88
	OpWrite16            byte = 0x8a
	OpSynchronizeCache16 byte = 0x91
	OpWriteSame16        byte = 0x93
	OpServiceActionIn16  byte = 0x9e // READ CAPACITY(16) and others
	OpReportLUNs         byte = 0xa0
)
