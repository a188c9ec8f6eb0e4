package rawwait

import (
	"os"
	"runtime/debug"
	"strconv"
	"strings"
)

// preemptOff is set when the runtime's asynchronous preemption is off:
// a raw wait would then keep its P until its descriptor is ready, through
// any stop-the-world (a GC) the whole process waits for.
var preemptOff = asyncPreemptOff(defaultGODEBUG(), os.Getenv("GODEBUG"))

// defaultGODEBUG is the binary's built-in GODEBUG (go.mod godebug lines,
// //go:debug directives), which GODEBUG in the environment overrides.
func defaultGODEBUG() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return ""
	}
	for _, s := range bi.Settings {
		if s.Key == "DefaultGODEBUG" {
			return s.Value
		}
	}
	return ""
}

// asyncPreemptOff reports whether the runtime turns asynchronous
// preemption off for these GODEBUG lists, applied in order, as the
// runtime reads them at start-up: comma-separated key=value settings, the
// last one of a key wins, a value that is not a number is ignored, any
// number but 0 is on. gccheckmark turns asynchronous preemption off too.
func asyncPreemptOff(lists ...string) bool {
	var off, checkmark int64
	for _, l := range lists {
		for _, f := range strings.Split(l, ",") {
			k, v, ok := strings.Cut(f, "=")
			if !ok {
				continue
			}
			n, err := strconv.ParseInt(v, 10, 32)
			if err != nil {
				continue
			}
			switch k {
			case "asyncpreemptoff":
				off = n
			case "gccheckmark":
				checkmark = n
			}
		}
	}
	return off != 0 || checkmark > 0
}
