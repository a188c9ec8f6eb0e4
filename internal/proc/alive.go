package proc

import (
	"os"
	"strconv"
	"strings"
)

// Alive reports whether pid (a process, or a thread of one) has not
// exited: /proc has it and it is not a zombie (whose files, the devices
// it served among them, are closed already).
func Alive(pid int) bool {
	if pid <= 0 {
		return false
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	// pid (comm) S ...: the state follows the last ')'.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 || i+2 >= len(s) {
		return false
	}
	return s[i+2] != 'Z' && s[i+2] != 'X'
}
