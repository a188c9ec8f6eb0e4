package scsi

import "errors"

// Sentinel errors wrapped by the parsers. Test for them with errors.Is.
var (
	// ErrShortData means the buffer ends before a field the format requires.
	ErrShortData = errors.New("scsi: data too short")
	// ErrMalformed means a field holds a value the format does not allow,
	// such as a length that is not a multiple of the entry size or a page
	// code other than the one asked for.
	ErrMalformed = errors.New("scsi: malformed data")
)
