//go:build cgo

package rdma

/*
#cgo CFLAGS: -O2 -Wall -Wno-unused-function
#cgo LDFLAGS: -ldl
#include <stdlib.h>
#include "shim.h"
*/
import "C"

import (
	"fmt"
	"sync"
	"unsafe"
)

// Library names the shim opens at run time.
const (
	libVerbs = "libibverbs.so.1"
	libCM    = "librdmacm.so.1"
)

var (
	loadOnce sync.Once
	loadErr  error
)

// load opens rdma-core once per process.
func load() error {
	loadOnce.Do(func() { loadErr = loadLibraries(libVerbs, libCM) })
	return loadErr
}

// loadLibraries dlopens the named libraries and resolves every symbol the
// shim needs. A failure wraps ErrLibraryMissing.
func loadLibraries(verbs, cm string) error {
	cv, cc := C.CString(verbs), C.CString(cm)
	defer C.free(unsafe.Pointer(cv))
	defer C.free(unsafe.Pointer(cc))
	const errLen = 512
	msg := (*C.char)(C.calloc(1, errLen))
	defer C.free(unsafe.Pointer(msg))
	if C.rd_load(cv, cc, msg, errLen) != 0 {
		return fmt.Errorf("load rdma-core: %s: %w", C.GoString(msg), ErrLibraryMissing)
	}
	return nil
}

// Supported reports whether rdma-core could be loaded; the error says why
// not. It does not look for RDMA devices.
func Supported() error {
	return load()
}

// wcStatusStr asks libibverbs for its name of a status (tests compare it
// with WCStatus.String).
func wcStatusStr(s WCStatus) string {
	return C.GoString(C.rd_wc_status_str(C.int(s)))
}
