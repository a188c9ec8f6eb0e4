package initiator

import (
	"fmt"
	"syscall"
)

// mapIOMem maps n bytes of page-aligned anonymous memory for I/O buffers
// that outlive any one connection (registered with each in turn).
func mapIOMem(n int) ([]byte, error) {
	mem, err := syscall.Mmap(-1, 0, n, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_PRIVATE|syscall.MAP_ANONYMOUS)
	if err != nil {
		return nil, fmt.Errorf("map %d bytes of I/O buffers: %w", n, err)
	}
	return mem, nil
}

func unmapIOMem(mem []byte) { _ = syscall.Munmap(mem) }
