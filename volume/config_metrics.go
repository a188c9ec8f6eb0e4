package volume

import (
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"strings"
)

// setMetricsListen accepts tcp:HOST:PORT (HOST may be empty) or
// unix:/PATH.
func setMetricsListen(c *Config, v string) error {
	kind, addr, _ := strings.Cut(v, ":")
	switch kind {
	case "tcp":
		if _, port, err := net.SplitHostPort(addr); err == nil {
			if n, err := strconv.ParseUint(port, 10, 16); err == nil && n > 0 {
				c.MetricsListen = v
				return nil
			}
		}
	case "unix":
		if filepath.IsAbs(addr) {
			c.MetricsListen = v
			return nil
		}
	}
	return fmt.Errorf("%q: want tcp:HOST:PORT or unix:/PATH", v)
}
