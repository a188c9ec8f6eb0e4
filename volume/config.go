package volume

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/iser-attach/iser-attach/discovery"
	"github.com/iser-attach/iser-attach/initiator"
)

// ConfigDir holds one configuration file per volume, NAME.conf. The
// environment variable ISER_ATTACH_CONFIG_DIR overrides it (ConfigDirPath).
var ConfigDir = "/etc/iser-attach/volumes"

// ConfigDirEnv names the environment variable that overrides ConfigDir.
const ConfigDirEnv = "ISER_ATTACH_CONFIG_DIR"

// Defaults of a volume configuration (DefaultConfig).
const (
	DefaultTransport          = "auto"
	DefaultFrontend           = "ublk"
	DefaultQueueDepth         = 128
	DefaultReplacementTimeout = 120 * time.Second
	DefaultNOPInterval        = 5 * time.Second
	DefaultNOPTimeout         = 5 * time.Second
	DefaultCommandTimeout     = 30 * time.Second
	DefaultLoginTimeout       = 15 * time.Second
	DefaultQueues             = 1
	DefaultNBDConnections     = 4
	DefaultPathSelector       = "round-robin"
	// DefaultIOScheduler is a new ublk device's I/O scheduler: none
	// dispatches each request from the thread that submits it (with
	// mq-deadline, Linux 7.2 hands every request to a kblockd worker
	// first; docs/fastpath.md).
	DefaultIOScheduler = "none"
)

// maxConfigBytes bounds a configuration file; real ones are a few hundred bytes.
const maxConfigBytes = 64 << 10

// Config is one volume's configuration file: what `attach NAME` needs.
// Every field has its key in the file (see ParseConfig).
type Config struct {
	// Name is the volume name (the file is Name.conf); Path is the file.
	Name, Path string
	// Portals are tried in order; at least one.
	Portals []string
	Target  string
	// LUN is the logical unit; AnyLUN (no lun key) means the target's
	// lowest-numbered disk, found when attaching.
	LUN    uint16
	AnyLUN bool
	// Transport is auto, iser or tcp; Frontend ublk or nbd.
	Transport, Frontend string
	// CHAP: secrets live in files given by absolute path, never in the
	// configuration file itself.
	CHAPUser, CHAPSecretFile, MutualUser, MutualSecretFile string
	QueueDepth                                             int
	// ReplacementTimeout is how long I/O waits for a lost session to come
	// back (0: fail at once); NOPInterval 0 turns NOP-Out pings off.
	ReplacementTimeout, NOPInterval, NOPTimeout, LoginTimeout time.Duration
	// CommandTimeout is how long a SCSI command may go without status
	// before it is aborted (then the LUN reset, then the session dropped).
	CommandTimeout time.Duration
	// NoPathTimeout is how long I/O of a volume with several portals
	// waits while no path is usable before it fails with EIO; negative
	// (the default) means ReplacementTimeout.
	NoPathTimeout time.Duration
	// AllPortals adds, before the login, every portal SendTargets lists
	// for the target to Portals, a path each (attach --all-portals).
	AllPortals bool
	// PathSelector chooses among the usable paths of a volume with several
	// portals: round-robin or queue-length (the fewest commands in flight).
	PathSelector string
	// Queues are ublk hardware queues; NBDConnections the sockets of an
	// NBD device.
	Queues, NBDConnections int
	// IOScheduler is the I/O scheduler a new ublk device gets (none,
	// mq-deadline, kyber, bfq), or keep: the kernel's choice.
	IOScheduler string
	// InitiatorName overrides the host's initiator IQN when not empty.
	InitiatorName string
	// MetricsListen, when not empty, serves Prometheus metrics at
	// /metrics: tcp:HOST:PORT or unix:PATH, as serve's --listen.
	MetricsListen string
	// ReadOnly exposes the LUN read-only: writes are refused by the
	// frontend, never sent to the target.
	ReadOnly bool
}

// ConfigError is a problem in a configuration file. Line is 1-based, or 0
// for problems of the whole file (a missing key); Key is the key concerned,
// when there is one, and Reason does not repeat it.
type ConfigError struct {
	Path   string
	Line   int
	Key    string
	Reason string
}

// Error is "PATH:LINE: key: reason", or "PATH:LINE: reason" for a line
// without a key.
func (e *ConfigError) Error() string {
	if e.Key != "" {
		return fmt.Sprintf("%s:%d: %s: %s", e.Path, e.Line, e.Key, e.Reason)
	}
	return fmt.Sprintf("%s:%d: %s", e.Path, e.Line, e.Reason)
}

// ConfigErrors is every problem ParseConfig found in one file: those of
// single lines in line order, then those of keys that need one another
// (on the line of the key concerned) and of missing keys (line 0).
// errors.As finds the first *ConfigError in it.
type ConfigErrors []*ConfigError

// Error is one line per problem (ConfigError.Error).
func (e ConfigErrors) Error() string {
	lines := make([]string, len(e))
	for i, ce := range e {
		lines[i] = ce.Error()
	}
	return strings.Join(lines, "\n")
}

// Unwrap returns the problems.
func (e ConfigErrors) Unwrap() []error {
	out := make([]error, len(e))
	for i, ce := range e {
		out[i] = ce
	}
	return out
}

// ConfigDirPath is the configuration directory: $ISER_ATTACH_CONFIG_DIR
// when set, else ConfigDir.
func ConfigDirPath() string {
	if d := os.Getenv(ConfigDirEnv); d != "" {
		return d
	}
	return ConfigDir
}

// ConfigPath is the configuration file of volume name.
func ConfigPath(name string) string { return filepath.Join(ConfigDirPath(), name+".conf") }

// DefaultConfig is the configuration of volume name before its file is
// read: every optional key at its default, no portal, no target.
func DefaultConfig(name string) Config {
	return Config{
		Name:               name,
		AnyLUN:             true,
		Transport:          DefaultTransport,
		Frontend:           DefaultFrontend,
		QueueDepth:         DefaultQueueDepth,
		ReplacementTimeout: DefaultReplacementTimeout,
		NOPInterval:        DefaultNOPInterval,
		NOPTimeout:         DefaultNOPTimeout,
		LoginTimeout:       DefaultLoginTimeout,
		CommandTimeout:     DefaultCommandTimeout,
		NoPathTimeout:      -1,
		PathSelector:       DefaultPathSelector,
		Queues:             DefaultQueues,
		NBDConnections:     DefaultNBDConnections,
		IOScheduler:        DefaultIOScheduler,
	}
}

// configKey parses one key's value into a Config.
type configKey struct {
	repeatable bool
	set        func(c *Config, v string) error
}

var configKeys = map[string]configKey{
	"portal":              {repeatable: true, set: setPortal},
	"target":              {set: func(c *Config, v string) error { return setName(&c.Target, v) }},
	"lun":                 {set: setLUN},
	"transport":           {set: func(c *Config, v string) error { return setChoice(&c.Transport, v, "auto", "iser", "tcp") }},
	"frontend":            {set: func(c *Config, v string) error { return setChoice(&c.Frontend, v, "ublk", "nbd") }},
	"chap_user":           {set: func(c *Config, v string) error { return setText(&c.CHAPUser, v) }},
	"chap_secret_file":    {set: func(c *Config, v string) error { return setAbsPath(&c.CHAPSecretFile, v) }},
	"mutual_user":         {set: func(c *Config, v string) error { return setText(&c.MutualUser, v) }},
	"mutual_secret_file":  {set: func(c *Config, v string) error { return setAbsPath(&c.MutualSecretFile, v) }},
	"queue_depth":         {set: func(c *Config, v string) error { return setInt(&c.QueueDepth, v, 1, 1024) }},
	"replacement_timeout": {set: func(c *Config, v string) error { return setDuration(&c.ReplacementTimeout, v, true) }},
	"nop_interval":        {set: func(c *Config, v string) error { return setDuration(&c.NOPInterval, v, true) }},
	"nop_timeout":         {set: func(c *Config, v string) error { return setDuration(&c.NOPTimeout, v, false) }},
	"login_timeout":       {set: func(c *Config, v string) error { return setDuration(&c.LoginTimeout, v, false) }},
	"command_timeout":     {set: func(c *Config, v string) error { return setDuration(&c.CommandTimeout, v, false) }},
	"no_path_timeout":     {set: func(c *Config, v string) error { return setDuration(&c.NoPathTimeout, v, true) }},
	"all_portals":         {set: func(c *Config, v string) error { return setBool(&c.AllPortals, v) }},
	"path_selector":       {set: func(c *Config, v string) error { return setChoice(&c.PathSelector, v, "round-robin", "queue-length") }},
	"queues":              {set: func(c *Config, v string) error { return setInt(&c.Queues, v, 1, 4096) }},
	"nbd_connections":     {set: func(c *Config, v string) error { return setInt(&c.NBDConnections, v, 1, 64) }},
	"io_scheduler":        {set: setIOScheduler},
	"initiator_name":      {set: func(c *Config, v string) error { return setName(&c.InitiatorName, v) }},
	"metrics_listen":      {set: setMetricsListen},
	"read_only":           {set: func(c *Config, v string) error { return setBool(&c.ReadOnly, v) }},
}

// ParseConfig reads the configuration file of volume name; path only
// names the file in errors. The format is key = value lines; '#' and ';'
// start comment lines; blank lines and one "[volume]" header before the
// first key are allowed. Keys are those of configKeys; portal may repeat,
// no other key may. Every problem is reported: the error is a
// ConfigErrors of one *ConfigError per problem.
func ParseConfig(name, path string, r io.Reader) (*Config, error) {
	if path == "" {
		path = name + ".conf"
	}
	var errs ConfigErrors
	fail := func(line int, key, format string, args ...any) {
		errs = append(errs, &ConfigError{Path: path, Line: line, Key: key, Reason: fmt.Sprintf(format, args...)})
	}
	if err := ValidName(name); err != nil {
		fail(0, "", "%v", err)
		return nil, errs
	}
	data, err := io.ReadAll(io.LimitReader(r, maxConfigBytes+1))
	if err != nil {
		fail(0, "", "read: %v", err)
		return nil, errs
	}
	if len(data) > maxConfigBytes {
		fail(0, "", "larger than %d bytes", maxConfigBytes)
		return nil, errs
	}
	c := DefaultConfig(name)
	c.Path = path
	seen := map[string]int{} // key -> line of its first occurrence
	header := false
	for i, raw := range strings.Split(string(data), "\n") {
		n := i + 1
		line := strings.TrimSpace(strings.TrimSuffix(raw, "\r"))
		switch {
		case line == "" || line[0] == '#' || line[0] == ';':
			continue
		case line[0] == '[':
			section := strings.TrimSpace(strings.TrimSuffix(strings.TrimPrefix(line, "["), "]"))
			switch {
			case !strings.HasSuffix(line, "]"):
				fail(n, "", "section header %q lacks ']'", truncate(line))
			case section != "volume":
				fail(n, "", "unknown section [%s]: only [volume]", truncate(section))
			case header:
				fail(n, "", "second [volume] header")
			case len(seen) > 0:
				fail(n, "", "[volume] must come before the first key")
			}
			header = true
			continue
		}
		key, value, ok := strings.Cut(line, "=")
		if !ok {
			fail(n, "", "%q is not key = value", truncate(line))
			continue
		}
		key, value = strings.TrimSpace(key), strings.TrimSpace(value)
		spec, known := configKeys[key]
		if !known {
			if near := nearestKey(key); near != "" {
				fail(n, truncate(key), "unknown key (did you mean '%s'?)", near)
			} else {
				fail(n, truncate(key), "unknown key")
			}
			continue
		}
		first, dup := seen[key]
		if !dup {
			seen[key] = n
		}
		switch {
		case dup && !spec.repeatable:
			fail(n, key, "duplicate key (first on line %d)", first)
		case value == "":
			fail(n, key, "empty value")
		default:
			if err := spec.set(&c, value); err != nil {
				fail(n, key, "%v", err)
			}
		}
	}
	bad := map[string]bool{}
	for _, e := range errs {
		bad[e.Key] = true
	}
	for _, e := range c.checkWhole(seen, bad) {
		e.Path = path
		errs = append(errs, e)
	}
	if len(errs) > 0 {
		return nil, errs
	}
	return &c, nil
}

// KeyLine is the line (1-based) of key's first occurrence in the file at
// path, for problems found after parsing (a secret file); 0 when the file
// cannot be read or lacks key.
func KeyLine(path, key string) int {
	data, err := os.ReadFile(path)
	if err != nil || len(data) > maxConfigBytes {
		return 0
	}
	for i, raw := range strings.Split(string(data), "\n") {
		k, _, ok := strings.Cut(raw, "=")
		if ok && strings.TrimSpace(k) == key {
			return i + 1
		}
	}
	return 0
}

// checkWhole checks what no single line can: required keys and the CHAP
// keys that need one another. A key that is present but has a bad line
// (bad) is not reported again as missing.
func (c *Config) checkWhole(seen map[string]int, bad map[string]bool) []*ConfigError {
	var out []*ConfigError
	check := func(wrong bool, key, reason string, about ...string) {
		for _, k := range append(about, key) {
			if bad[k] {
				return
			}
		}
		if wrong {
			out = append(out, &ConfigError{Line: seen[key], Key: key, Reason: reason})
		}
	}
	check(c.Target == "" && seen["target"] == 0, "target", "no target (target = iqn....)")
	check(len(c.Portals) == 0 && seen["portal"] == 0, "portal", "no portal (portal = host[:port])")
	check(c.MutualUser != "" && c.CHAPUser == "", "mutual_user", "needs chap_user (mutual CHAP is on top of one-way CHAP)", "chap_user")
	check(c.MutualUser != "" && c.MutualSecretFile == "", "mutual_user", "needs mutual_secret_file", "mutual_secret_file")
	check(c.MutualSecretFile != "" && c.MutualUser == "", "mutual_secret_file", "needs mutual_user", "mutual_user")
	check(c.CHAPUser != "" && c.CHAPSecretFile == "", "chap_user", "needs chap_secret_file", "chap_secret_file")
	check(c.CHAPSecretFile != "" && c.CHAPUser == "", "chap_secret_file", "needs chap_user", "chap_user")
	sort.SliceStable(out, func(i, j int) bool { return out[i].Line != 0 && (out[j].Line == 0 || out[i].Line < out[j].Line) })
	return out
}

// nearestKey is the known key a misspelt one most likely means: the same
// key in other case or with '-' for '_', else the one at the smallest edit
// distance, at most 2 (1 for keys of up to 4 letters); "" when none is
// that near.
func nearestKey(key string) string {
	norm := strings.ToLower(strings.ReplaceAll(key, "-", "_"))
	if _, ok := configKeys[norm]; ok {
		return norm
	}
	limit := 2
	if len(norm) <= 4 {
		limit = 1
	}
	best, bestD := "", limit+1
	for k := range configKeys {
		if d := editDistance(norm, k); d < bestD || d == bestD && k < best {
			best, bestD = k, d
		}
	}
	if bestD > limit {
		return ""
	}
	return best
}

// editDistance is the Levenshtein distance of a and b (bytes; keys are
// ASCII).
func editDistance(a, b string) int {
	if len(a) > 64 || len(b) > 64 {
		return 64
	}
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

func truncate(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}

func setPortal(c *Config, v string) error {
	p, err := discovery.ParsePortal(v)
	if err != nil {
		return err
	}
	for _, old := range c.Portals {
		if q, err := discovery.ParsePortal(old); err == nil && q.String() == p.String() {
			return fmt.Errorf("%s is listed twice", v)
		}
	}
	c.Portals = append(c.Portals, v)
	return nil
}

// setName accepts an iSCSI name (initiator.CheckName).
func setName(dst *string, v string) error {
	if err := initiator.CheckName(v); err != nil {
		return err
	}
	*dst = v
	return nil
}

func setLUN(c *Config, v string) error {
	n, err := strconv.ParseUint(v, 10, 16)
	if err != nil || n > 16383 {
		return fmt.Errorf("%q: want a LUN from 0 to 16383", v)
	}
	c.LUN, c.AnyLUN = uint16(n), false
	return nil
}

func setChoice(dst *string, v string, choices ...string) error {
	for _, ch := range choices {
		if v == ch {
			*dst = v
			return nil
		}
	}
	return fmt.Errorf("%q: want %s", v, strings.Join(choices, ", "))
}

// schedulerName is what an I/O scheduler's name may hold
// (/sys/block/*/queue/scheduler takes it).
var schedulerName = regexp.MustCompile(`^[a-z0-9_-]{1,32}$`)

// ValidIOScheduler checks an io_scheduler value: keep, or a scheduler's
// name (whether the kernel has it is known only when it is set).
func ValidIOScheduler(v string) error {
	if v == "keep" || schedulerName.MatchString(v) {
		return nil
	}
	return fmt.Errorf("%q: want keep or a scheduler name (none, mq-deadline, kyber, bfq)", v)
}

func setIOScheduler(c *Config, v string) error {
	if err := ValidIOScheduler(v); err != nil {
		return err
	}
	c.IOScheduler = v
	return nil
}

// setText accepts a user name: no control characters.
func setText(dst *string, v string) error {
	if strings.IndexFunc(v, func(r rune) bool { return r < ' ' || r == 0x7f }) >= 0 {
		return fmt.Errorf("control characters in %q", v)
	}
	if len(v) > 255 {
		return fmt.Errorf("longer than 255 bytes")
	}
	*dst = v
	return nil
}

func setAbsPath(dst *string, v string) error {
	if err := setText(dst, v); err != nil {
		return err
	}
	if !filepath.IsAbs(v) {
		*dst = ""
		return fmt.Errorf("%q is not an absolute path", v)
	}
	return nil
}

// setBool accepts true or false.
func setBool(dst *bool, v string) error {
	switch v {
	case "true":
		*dst = true
	case "false":
		*dst = false
	default:
		return fmt.Errorf("%q: want true or false", v)
	}
	return nil
}

func setInt(dst *int, v string, lo, hi int) error {
	n, err := strconv.Atoi(v)
	if err != nil || n < lo || n > hi {
		return fmt.Errorf("%q: want a number from %d to %d", v, lo, hi)
	}
	*dst = n
	return nil
}

// ParseDuration reads a timeout as an admin writes it: a plain number is
// seconds (iscsiadm's timeouts are seconds: 30, 1.5), anything else a Go
// duration (30s, 2m, 1m30s). The error says both forms.
func ParseDuration(v string) (time.Duration, error) {
	s := v
	if num := strings.TrimPrefix(v, "-"); num != "" && num != "." && strings.Trim(num, "0123456789.") == "" {
		s += "s"
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("%q is not a duration: give seconds (30) or a Go duration (30s, 2m)", v)
	}
	return d, nil
}

func setDuration(dst *time.Duration, v string, zeroOK bool) error {
	d, err := ParseDuration(v)
	switch {
	case err != nil:
		return err
	case d < 0 || d == 0 && !zeroOK:
		if zeroOK {
			return fmt.Errorf("%s: must not be negative", v)
		}
		return fmt.Errorf("%s: must be more than 0", v)
	}
	*dst = d
	return nil
}

// Marshal writes c in the file format: a header comment, portal, target,
// transport and frontend always, lun unless AnyLUN, the other keys only
// when they differ from their defaults. A valid c survives Marshal and ParseConfig
// unchanged (Path aside).
func (c *Config) Marshal() []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "# iser-attach volume %s: attach it with `iser-attach attach %s`.\n", c.Name, c.Name)
	b.WriteString("# key = value lines; see `iser-attach volume add --help` for the keys.\n")
	for _, p := range c.Portals {
		fmt.Fprintf(&b, "portal = %s\n", p)
	}
	fmt.Fprintf(&b, "target = %s\n", c.Target)
	if !c.AnyLUN || c.LUN != 0 { // a LUN set without clearing AnyLUN is kept
		fmt.Fprintf(&b, "lun = %d\n", c.LUN)
	}
	fmt.Fprintf(&b, "transport = %s\nfrontend = %s\n", c.Transport, c.Frontend)
	d := DefaultConfig(c.Name)
	str := func(key, v, def string) {
		if v != def {
			fmt.Fprintf(&b, "%s = %s\n", key, v)
		}
	}
	num := func(key string, v, def int) {
		if v != def {
			fmt.Fprintf(&b, "%s = %d\n", key, v)
		}
	}
	dur := func(key string, v, def time.Duration) {
		if v != def {
			fmt.Fprintf(&b, "%s = %s\n", key, v)
		}
	}
	str("chap_user", c.CHAPUser, "")
	str("chap_secret_file", c.CHAPSecretFile, "")
	str("mutual_user", c.MutualUser, "")
	str("mutual_secret_file", c.MutualSecretFile, "")
	num("queue_depth", c.QueueDepth, d.QueueDepth)
	dur("replacement_timeout", c.ReplacementTimeout, d.ReplacementTimeout)
	dur("nop_interval", c.NOPInterval, d.NOPInterval)
	dur("nop_timeout", c.NOPTimeout, d.NOPTimeout)
	dur("login_timeout", c.LoginTimeout, d.LoginTimeout)
	dur("command_timeout", c.CommandTimeout, d.CommandTimeout)
	dur("no_path_timeout", c.NoPathTimeout, d.NoPathTimeout)
	if c.AllPortals {
		b.WriteString("all_portals = true\n")
	}
	str("path_selector", c.PathSelector, d.PathSelector)
	num("queues", c.Queues, d.Queues)
	num("nbd_connections", c.NBDConnections, d.NBDConnections)
	str("io_scheduler", c.IOScheduler, d.IOScheduler)
	str("initiator_name", c.InitiatorName, "")
	str("metrics_listen", c.MetricsListen, "")
	if c.ReadOnly {
		b.WriteString("read_only = true\n")
	}
	return b.Bytes()
}

// noVolumeError says that a volume has no configuration file.
type noVolumeError struct{ name, path string }

func (e *noVolumeError) Error() string {
	return fmt.Sprintf("no volume %s: %s does not exist", e.name, e.path)
}

func (e *noVolumeError) Unwrap() error { return fs.ErrNotExist }

// LoadConfig reads the configuration file of volume name from
// ConfigDirPath. A missing file is an error wrapping fs.ErrNotExist.
func LoadConfig(name string) (*Config, error) {
	if err := ValidName(name); err != nil {
		return nil, fmt.Errorf("load volume: %w", err)
	}
	path := ConfigPath(name)
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, &noVolumeError{name, path}
	}
	if err != nil {
		return nil, fmt.Errorf("load volume %s: %w", name, err)
	}
	defer f.Close()
	return ParseConfig(name, path, f)
}

// WriteConfig writes c to ConfigPath(c.Name) atomically (a temporary file
// renamed over it), mode 0644, creating the directory. It refuses an
// invalid c, and an existing file unless overwrite. It sets c.Path.
func WriteConfig(c *Config, overwrite bool) error {
	if err := ValidName(c.Name); err != nil {
		return fmt.Errorf("write volume: %w", err)
	}
	data := c.Marshal()
	if _, err := ParseConfig(c.Name, "", bytes.NewReader(data)); err != nil {
		return fmt.Errorf("write volume %s: %w", c.Name, err)
	}
	dir := ConfigDirPath()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("write volume %s: %w", c.Name, err)
	}
	path := ConfigPath(c.Name)
	tmp, err := os.CreateTemp(dir, "."+c.Name+".conf.tmp-*")
	if err != nil {
		return fmt.Errorf("write volume %s: %w", c.Name, err)
	}
	defer os.Remove(tmp.Name()) // after a rename: nothing to remove
	_, err = tmp.Write(data)
	if err == nil {
		err = tmp.Chmod(0o644)
	}
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("write volume %s: %w", c.Name, err)
	}
	if err := installFile(tmp.Name(), path, overwrite); err != nil {
		return fmt.Errorf("write volume %s: %w", c.Name, err)
	}
	syncDir(dir)
	c.Path = path
	return nil
}

// installFile moves tmp to path. Without overwrite it links (which fails
// atomically when path exists) where the file system can.
func installFile(tmp, path string, overwrite bool) error {
	if overwrite {
		return os.Rename(tmp, path)
	}
	err := os.Link(tmp, path)
	if errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("%s already exists: %w", path, fs.ErrExist)
	}
	if err == nil {
		return nil
	}
	if _, serr := os.Lstat(path); serr == nil { // no hard links here: check, then rename
		return fmt.Errorf("%s already exists: %w", path, fs.ErrExist)
	}
	return os.Rename(tmp, path)
}

func syncDir(dir string) {
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		d.Close()
	}
}

// RemoveConfig deletes the configuration file of volume name.
func RemoveConfig(name string) error {
	if err := ValidName(name); err != nil {
		return fmt.Errorf("remove volume: %w", err)
	}
	path := ConfigPath(name)
	err := os.Remove(path)
	if errors.Is(err, fs.ErrNotExist) {
		return &noVolumeError{name, path}
	}
	if err != nil {
		return fmt.Errorf("remove volume %s: %w", name, err)
	}
	return nil
}

// ListConfigs reads every NAME.conf in ConfigDirPath (hidden files aside),
// sorted by name. A missing directory holds no volumes. Files that do not
// parse are left out and reported in the error, an errors.Join of
// *ConfigError, while the good ones are still returned.
func ListConfigs() ([]*Config, error) {
	dir := ConfigDirPath()
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list volumes in %s: %w", dir, err)
	}
	type bad struct {
		name string
		err  error
	}
	var out []*Config
	var bads []bad
	for _, e := range entries {
		name, ok := strings.CutSuffix(e.Name(), ".conf")
		if !ok || strings.HasPrefix(e.Name(), ".") || e.IsDir() {
			continue
		}
		path := filepath.Join(dir, e.Name())
		c, err := readConfig(name, path)
		if err != nil {
			bads = append(bads, bad{name, err})
			continue
		}
		out = append(out, c)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	sort.Slice(bads, func(i, j int) bool { return bads[i].name < bads[j].name })
	errs := make([]error, len(bads))
	for i, b := range bads {
		errs[i] = b.err
	}
	return out, errors.Join(errs...)
}

// readConfig parses one file; every error is a *ConfigError.
func readConfig(name, path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		reason := err.Error()
		var pe *fs.PathError
		if errors.As(err, &pe) {
			reason = pe.Op + ": " + pe.Err.Error()
		}
		return nil, &ConfigError{Path: path, Reason: reason}
	}
	return ParseConfig(name, path, bytes.NewReader(data))
}
