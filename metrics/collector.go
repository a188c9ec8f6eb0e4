package metrics

import (
	"strconv"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// Labels name a volume's series: the volume (or NBD export) name, the
// target IQN and the LUN.
type Labels struct {
	Volume, Target string
	LUN            uint16
}

// SessionStates are the values of iser_attach_session_state's state label.
// attached: a session carries I/O; recovering: the session was lost and
// I/O waits; failed: down longer than the replacement timeout, I/O fails
// while recovery goes on; closed: logged out.
var SessionStates = []string{"attached", "recovering", "failed", "closed"}

// SessionStatus is what a SessionReporter reports.
type SessionStatus struct {
	// State is one of SessionStates.
	State string
	// Recoveries counts sessions reinstated after a fault.
	Recoveries uint64
}

// SessionReporter reports a volume's session (the CLI adapts an
// initiator.Nexus).
type SessionReporter interface {
	SessionStatus() SessionStatus
}

// CommandTimeoutCounter counts SCSI commands that timed out. A Volume
// whose Timeouts is nil has no iser_attach_command_timeouts_total series.
type CommandTimeoutCounter interface {
	CommandTimeouts() uint64
}

// PathStatus is one path of a multipath volume.
type PathStatus struct {
	Portal string
	Up     bool   // the path carries I/O
	IOs    uint64 // commands issued on it
	// Failovers counts commands moved from it to another path.
	Failovers uint64
}

// PathReporter reports a multipath volume's paths (the CLI adapts an
// initiator.Multipath).
type PathReporter interface {
	PathStatuses() []PathStatus
}

// Volume is one volume's sources of metrics.
type Volume struct {
	Labels
	// IO is the volume's I/O counters (required).
	IO *IO
	// Session reports the session state and recoveries; nil: no such series.
	Session SessionReporter
	// Timeouts counts command timeouts; nil: no such series.
	Timeouts CommandTimeoutCounter
	// Paths reports the paths of a multipath volume; nil: no path series.
	Paths PathReporter
}

var (
	volumeLabels = []string{"volume", "target", "lun"}
	opLabels     = append(append([]string{}, volumeLabels...), "op")

	descIOTotal    = prometheus.NewDesc("iser_attach_io_total", "Completed block I/Os.", opLabels, nil)
	descIOBytes    = prometheus.NewDesc("iser_attach_io_bytes_total", "Bytes read or written by completed block I/Os.", opLabels, nil)
	descIOErrors   = prometheus.NewDesc("iser_attach_io_errors_total", "Block I/Os that completed with an error.", opLabels, nil)
	descIOLatency  = prometheus.NewDesc("iser_attach_io_latency_seconds", "Latency of block I/Os, from the frontend's request to the target's answer.", opLabels, nil)
	descInflight   = prometheus.NewDesc("iser_attach_inflight", "Block I/Os started and not completed.", volumeLabels, nil)
	descState      = prometheus.NewDesc("iser_attach_session_state", "1 for the session's current state (attached, recovering, failed, closed), 0 for the others.", append(append([]string{}, volumeLabels...), "state"), nil)
	descRecoveries = prometheus.NewDesc("iser_attach_session_recoveries_total", "iSCSI sessions reinstated after a fault.", volumeLabels, nil)
	descTimeouts   = prometheus.NewDesc("iser_attach_command_timeouts_total", "SCSI commands that timed out.", volumeLabels, nil)

	pathLabels    = append(append([]string{}, volumeLabels...), "portal")
	descPathUp    = prometheus.NewDesc("iser_attach_path_up", "1 while a path of a multipath volume carries I/O, else 0.", pathLabels, nil)
	descPathCmds  = prometheus.NewDesc("iser_attach_path_commands_total", "SCSI commands issued on a path.", pathLabels, nil)
	descPathMoved = prometheus.NewDesc("iser_attach_path_failovers_total", "SCSI commands moved from a failed path to another.", pathLabels, nil)
)

// Collector is a prometheus.Collector over volumes' counters: each Collect
// reads them and builds constant metrics, so the I/O path never touches a
// Prometheus type.
type Collector struct {
	mu   sync.Mutex
	vols []*Volume
}

// NewCollector returns a Collector of vols.
func NewCollector(vols ...Volume) *Collector {
	c := &Collector{}
	for _, v := range vols {
		c.Add(v)
	}
	return c
}

// Add collects v too, until the returned remove is called.
func (c *Collector) Add(v Volume) (remove func()) {
	p := &v
	c.mu.Lock()
	c.vols = append(c.vols, p)
	c.mu.Unlock()
	return func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		for i, q := range c.vols {
			if q == p {
				c.vols = append(c.vols[:i], c.vols[i+1:]...)
				return
			}
		}
	}
}

// Describe sends every metric's descriptor.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descIOTotal, descIOBytes, descIOErrors, descIOLatency, descInflight,
		descState, descRecoveries, descTimeouts, descPathUp, descPathCmds, descPathMoved} {
		ch <- d
	}
}

// Collect reads every volume's counters.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	vols := append([]*Volume(nil), c.vols...)
	c.mu.Unlock()
	for _, v := range vols {
		collectVolume(ch, v)
	}
}

func collectVolume(ch chan<- prometheus.Metric, v *Volume) {
	lv := []string{v.Volume, v.Target, strconv.Itoa(int(v.LUN))}
	with := func(extra string) []string { return append(append(make([]string, 0, 4), lv...), extra) }
	snap := v.IO.Snapshot()
	bounds := snap.BoundsSeconds
	for _, op := range Ops {
		st := snap.Op(op)
		ol := with(op.String())
		ch <- prometheus.MustNewConstMetric(descIOTotal, prometheus.CounterValue, float64(st.Count), ol...)
		ch <- prometheus.MustNewConstMetric(descIOBytes, prometheus.CounterValue, float64(st.Bytes), ol...)
		ch <- prometheus.MustNewConstMetric(descIOErrors, prometheus.CounterValue, float64(st.Errors), ol...)
		cum := make(map[float64]uint64, len(bounds))
		var n uint64
		for i, b := range bounds {
			n += st.Buckets[i]
			cum[b] = n
		}
		ch <- prometheus.MustNewConstHistogram(descIOLatency, st.Count, st.LatencySeconds, cum, ol...)
	}
	ch <- prometheus.MustNewConstMetric(descInflight, prometheus.GaugeValue, float64(snap.Inflight), lv...)
	if v.Session != nil {
		ss := v.Session.SessionStatus()
		for _, s := range SessionStates {
			val := 0.0
			if s == ss.State {
				val = 1
			}
			ch <- prometheus.MustNewConstMetric(descState, prometheus.GaugeValue, val, with(s)...)
		}
		ch <- prometheus.MustNewConstMetric(descRecoveries, prometheus.CounterValue, float64(ss.Recoveries), lv...)
	}
	if v.Timeouts != nil {
		ch <- prometheus.MustNewConstMetric(descTimeouts, prometheus.CounterValue, float64(v.Timeouts.CommandTimeouts()), lv...)
	}
	if v.Paths != nil {
		for _, p := range v.Paths.PathStatuses() {
			pl := with(p.Portal)
			up := 0.0
			if p.Up {
				up = 1
			}
			ch <- prometheus.MustNewConstMetric(descPathUp, prometheus.GaugeValue, up, pl...)
			ch <- prometheus.MustNewConstMetric(descPathCmds, prometheus.CounterValue, float64(p.IOs), pl...)
			ch <- prometheus.MustNewConstMetric(descPathMoved, prometheus.CounterValue, float64(p.Failovers), pl...)
		}
	}
}
