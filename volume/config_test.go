package volume

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"
)

func tempConfigDir(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "volumes")
	t.Setenv(ConfigDirEnv, dir)
	return dir
}

const minimalConf = "portal = 10.0.0.1\ntarget = iqn.2026-01.com.example:disk1\n"

func TestParseConfigValid(t *testing.T) {
	full := DefaultConfig("db")
	full.Path = "db.conf"
	full.Portals = []string{"10.0.0.1", "[fd00::2]:3261", "storage.example"}
	full.Target = "iqn.2026-01.com.example:db"
	full.LUN, full.AnyLUN = 16383, false
	full.Transport, full.Frontend = "iser", "nbd"
	full.CHAPUser, full.CHAPSecretFile = "alice", "/etc/iser-attach/secret"
	full.MutualUser, full.MutualSecretFile = "target1", "/etc/iser-attach/mutual"
	full.QueueDepth = 1024
	full.ReplacementTimeout, full.NOPInterval = 0, 0
	full.NOPTimeout, full.LoginTimeout = 3*time.Second, time.Minute
	full.CommandTimeout = 45 * time.Second
	full.NoPathTimeout = 20 * time.Second
	full.AllPortals, full.PathSelector = true, "queue-length"
	full.Queues, full.NBDConnections = 2, 8
	full.IOScheduler = "mq-deadline"
	full.InitiatorName = "iqn.2026-01.com.example:host1"
	full.ReadOnly = true

	minimal := DefaultConfig("db")
	minimal.Path = "db.conf"
	minimal.Portals = []string{"10.0.0.1"}
	minimal.Target = "iqn.2026-01.com.example:disk1"

	keep := minimal
	keep.IOScheduler = "keep"

	iscsiadmForms := minimal
	iscsiadmForms.Portals = []string{"10.0.0.1:3260,1", "[fe80::1%eth0]:3260,1"}
	iscsiadmForms.NOPTimeout = 2500 * time.Millisecond

	tests := []struct {
		name, in string
		want     Config
	}{
		{"minimal", minimalConf, minimal},
		{"comments, blanks, CRLF, header", "# a comment\r\n; another\r\n\r\n[volume]\r\n  portal=10.0.0.1  \r\ntarget =iqn.2026-01.com.example:disk1\r\n", minimal},
		{"header with spaces", "[ volume ]\n" + minimalConf, minimal},
		{"no final newline", strings.TrimSuffix(minimalConf, "\n"), minimal},
		{"iscsiadm's forms: portals with their tag, timeouts in seconds", `portal = 10.0.0.1:3260,1
portal = [fe80::1%eth0]:3260,1
target = iqn.2026-01.com.example:disk1
replacement_timeout = 120
nop_interval = 5
nop_timeout = 2.5
login_timeout = 15
command_timeout = 30
`, iscsiadmForms},
		{"everything", `[volume]
portal = 10.0.0.1
portal = [fd00::2]:3261
portal = storage.example
target = iqn.2026-01.com.example:db
lun = 16383
transport = iser
frontend = nbd
chap_user = alice
chap_secret_file = /etc/iser-attach/secret
mutual_user = target1
mutual_secret_file = /etc/iser-attach/mutual
queue_depth = 1024
replacement_timeout = 0
nop_interval = 0s
nop_timeout = 3s
login_timeout = 1m
command_timeout = 45s
no_path_timeout = 20s
all_portals = true
path_selector = queue-length
queues = 2
nbd_connections = 8
io_scheduler = mq-deadline
initiator_name = iqn.2026-01.com.example:host1
read_only = true
`, full},
		{"read_only false", minimalConf + "read_only = false\n", minimal},
		{"all_portals false", minimalConf + "all_portals = false\n", minimal},
		{"path_selector round-robin", minimalConf + "path_selector = round-robin\n", minimal},
		{"io_scheduler none", minimalConf + "io_scheduler = none\n", minimal},
		{"io_scheduler keep", minimalConf + "io_scheduler = keep\n", keep},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseConfig("db", "", strings.NewReader(tt.in))
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(*got, tt.want) {
				t.Fatalf("got  %+v\nwant %+v", *got, tt.want)
			}
			// Marshal round-trips.
			again, err := ParseConfig("db", "", bytes.NewReader(got.Marshal()))
			if err != nil {
				t.Fatalf("marshalled config does not parse: %v\n%s", err, got.Marshal())
			}
			if !reflect.DeepEqual(again, got) {
				t.Fatalf("round trip: got %+v\nwant %+v", again, got)
			}
		})
	}
}

func TestParseConfigErrors(t *testing.T) {
	base := minimalConf
	tests := []struct {
		name, in string
		line     int
		key      string
		reason   string // a substring
	}{
		{"missing target", "portal = 10.0.0.1\n", 0, "target", "no target"},
		{"missing portal", "target = iqn.2026-01.com.example:x\n", 0, "portal", "no portal"},
		{"empty file", "", 0, "target", "no target"},
		{"no equals", base + "lun 3\n", 3, "", "not key = value"},
		{"unknown key", base + "Lun = 3\n", 3, "Lun", "unknown key"},
		{"duplicate", base + "lun = 1\nlun = 2\n", 4, "lun", "duplicate key (first on line 3)"},
		{"duplicate target", base + "target = iqn.2026-01.com.example:y\n", 3, "target", "duplicate key"},
		{"duplicate portal", base + "portal = 10.0.0.1:3260\n", 3, "portal", "listed twice"},
		{"duplicate portal tag", base + "portal = 10.0.0.1,2\n", 3, "portal", "listed twice"},
		{"empty value", base + "transport =\n", 3, "transport", "empty value"},
		{"bad portal", "portal = 10.0.0.1:99999\n" + base, 1, "portal", "malformed portal"},
		{"v6 unclosed bracket", "portal = [fd00::1:3260\n", 1, "portal", "missing ']'"},
		{"target no prefix", "portal = h\ntarget = disk1\n", 2, "target", "not an iSCSI name"},
		{"target only prefix", "portal = h\ntarget = iqn.\n", 2, "target", "not an iSCSI name"},
		{"target space", "portal = h\ntarget = iqn.2026-01.x:a b\n", 2, "target", "spaces"},
		{"target too long", "portal = h\ntarget = iqn." + strings.Repeat("a", 220) + "\n", 2, "target", "223"},
		{"lun too big", base + "lun = 16384\n", 3, "lun", "0 to 16383"},
		{"lun negative", base + "lun = -1\n", 3, "lun", "0 to 16383"},
		{"lun hex", base + "lun = 0x1\n", 3, "lun", "0 to 16383"},
		{"transport", base + "transport = rdma\n", 3, "transport", "auto, iser, tcp"},
		{"frontend", base + "frontend = loop\n", 3, "frontend", "ublk, nbd"},
		{"relative secret", base + "chap_user = u\nchap_secret_file = secret\n", 4, "chap_secret_file", "absolute"},
		{"mutual without chap", base + "mutual_user = t\nmutual_secret_file = /s\n", 3, "mutual_user", "needs chap_user"},
		{"chap without secret", base + "chap_user = u\n", 3, "chap_user", "needs chap_secret_file"},
		{"secret without chap", base + "chap_secret_file = /s\n", 3, "chap_secret_file", "needs chap_user"},
		{"mutual without secret", base + "chap_user = u\nchap_secret_file = /s\nmutual_user = t\n", 5, "mutual_user", "needs mutual_secret_file"},
		{"queue depth 0", base + "queue_depth = 0\n", 3, "queue_depth", "1 to 1024"},
		{"queue depth big", base + "queue_depth = 1025\n", 3, "queue_depth", "1 to 1024"},
		{"replacement negative", base + "replacement_timeout = -1s\n", 3, "replacement_timeout", "negative"},
		{"replacement not a duration", base + "replacement_timeout = soon\n", 3, "replacement_timeout",
			`"soon" is not a duration: give seconds (30) or a Go duration (30s, 2m)`},
		{"replacement negative seconds", base + "replacement_timeout = -1\n", 3, "replacement_timeout", "negative"},
		{"portals in one line", base + "portal = 10.0.0.2:3260,1,10.0.0.3:3260,1\n", 3, "portal", "malformed portal"},
		{"nop timeout 0", base + "nop_timeout = 0\n", 3, "nop_timeout", "more than 0"},
		{"login timeout 0", base + "login_timeout = 0s\n", 3, "login_timeout", "more than 0"},
		{"command timeout 0", base + "command_timeout = 0\n", 3, "command_timeout", "more than 0"},
		{"no-path timeout negative", base + "no_path_timeout = -1s\n", 3, "no_path_timeout", "must not be negative"},
		{"queues 0", base + "queues = 0\n", 3, "queues", "1 to 4096"},
		{"nbd connections", base + "nbd_connections = 65\n", 3, "nbd_connections", "1 to 64"},
		{"initiator name", base + "initiator_name = host1\n", 3, "initiator_name", "not an iSCSI name"},
		{"user control char", base + "chap_user = a\x01b\n", 3, "chap_user", "control"},
		{"read_only yes", base + "read_only = yes\n", 3, "read_only", "want true or false"},
		{"read_only 1", base + "read_only = 1\n", 3, "read_only", "want true or false"},
		{"all_portals yes", base + "all_portals = yes\n", 3, "all_portals", "want true or false"},
		{"all_portals TRUE", base + "all_portals = TRUE\n", 3, "all_portals", "want true or false"},
		{"all_portals twice", base + "all_portals = true\nall_portals = true\n", 4, "all_portals", "duplicate key (first on line 3)"},
		{"path_selector unknown", base + "path_selector = service-time\n", 3, "path_selector", "want round-robin, queue-length"},
		{"path_selector dm form", base + "path_selector = round-robin 0\n", 3, "path_selector", "want round-robin, queue-length"},
		{"path_selector empty", base + "path_selector =\n", 3, "path_selector", "empty value"},
		{"io_scheduler with a space", base + "io_scheduler = mq deadline\n", 3, "io_scheduler", "want keep or a scheduler name"},
		{"io_scheduler a path", base + "io_scheduler = ../none\n", 3, "io_scheduler", "want keep or a scheduler name"},
		{"other section", "[target]\n" + base, 1, "", "unknown section"},
		{"two headers", "[volume]\n[volume]\n" + base, 2, "", "second [volume]"},
		{"header after keys", base + "[volume]\n", 3, "", "before the first key"},
		{"header unclosed", "[volume\n" + base, 1, "", "lacks ']'"},
		{"too large", base + strings.Repeat("#", maxConfigBytes), 0, "", "larger than"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseConfig("vol", "/etc/x/vol.conf", strings.NewReader(tt.in))
			var ce *ConfigError
			if !errors.As(err, &ce) {
				t.Fatalf("want a *ConfigError, got %v", err)
			}
			if ce.Line != tt.line || ce.Key != tt.key || !strings.Contains(ce.Reason, tt.reason) {
				t.Fatalf("got line %d key %q reason %q; want line %d key %q reason ~%q", ce.Line, ce.Key, ce.Reason, tt.line, tt.key, tt.reason)
			}
			if prefix := "/etc/x/vol.conf:" + strconv.Itoa(tt.line) + ": "; !strings.HasPrefix(err.Error(), prefix) {
				t.Fatalf("error %q does not start with %q", err, prefix)
			}
		})
	}
}

// TestParseDuration: a plain number is seconds (iscsiadm's timeouts), a Go
// duration still works, and the error gives both forms.
func TestParseDuration(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want time.Duration
		err  bool
	}{
		{"0", 0, false}, {"5", 5 * time.Second, false}, {"120", 2 * time.Minute, false},
		{"1.5", 1500 * time.Millisecond, false}, {"-1", -time.Second, false},
		{"15s", 15 * time.Second, false}, {"2m", 2 * time.Minute, false}, {"1m30s", 90 * time.Second, false},
		{"250ms", 250 * time.Millisecond, false},
		{"", 0, true}, {"abc", 0, true}, {".", 0, true}, {"1.2.3", 0, true}, {"5 s", 0, true},
		{"s", 0, true}, {"-", 0, true}, {"30x", 0, true}, {"1e3", 0, true},
	} {
		got, err := ParseDuration(tt.in)
		if tt.err {
			want := strconv.Quote(tt.in) + " is not a duration: give seconds (30) or a Go duration (30s, 2m)"
			if err == nil || err.Error() != want {
				t.Errorf("ParseDuration(%q) = %v, %v; want the error %q", tt.in, got, err, want)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("ParseDuration(%q) = %v, %v; want %v", tt.in, got, err, tt.want)
		}
	}
}

func TestParseConfigBadName(t *testing.T) {
	_, err := ParseConfig(".hidden", "", strings.NewReader(minimalConf))
	var ce *ConfigError
	if !errors.As(err, &ce) || ce.Line != 0 {
		t.Fatalf("want a line-0 ConfigError, got %v", err)
	}
}

func TestMarshalOmitsDefaults(t *testing.T) {
	c := DefaultConfig("v")
	c.Portals, c.Target = []string{"h"}, "iqn.2026-01.x:y"
	got := string(c.Marshal())
	for _, want := range []string{"portal = h\n", "target = iqn.2026-01.x:y\n", "transport = auto\n", "frontend = ublk\n"} {
		if !strings.Contains(got, want) {
			t.Errorf("missing %q in\n%s", want, got)
		}
	}
	for _, not := range []string{"lun", "queue_depth", "timeout", "nop_interval", "queues", "nbd_connections", "chap", "initiator_name"} {
		if strings.Contains(got, not) {
			t.Errorf("default %s written:\n%s", not, got)
		}
	}
	if !strings.HasPrefix(got, "#") {
		t.Errorf("no header comment:\n%s", got)
	}
	c.ReplacementTimeout = 0
	if !strings.Contains(string(c.Marshal()), "replacement_timeout = 0s\n") {
		t.Errorf("replacement_timeout 0 must be written:\n%s", c.Marshal())
	}
}

func TestConfigDirPath(t *testing.T) {
	t.Setenv(ConfigDirEnv, "")
	if got := ConfigDirPath(); got != ConfigDir {
		t.Fatalf("ConfigDirPath() = %q, want %q", got, ConfigDir)
	}
	t.Setenv(ConfigDirEnv, "/tmp/elsewhere")
	if got := ConfigDirPath(); got != "/tmp/elsewhere" {
		t.Fatalf("ConfigDirPath() = %q with the environment set", got)
	}
}

func TestWriteLoadRemoveConfig(t *testing.T) {
	dir := tempConfigDir(t)
	c := DefaultConfig("data")
	c.Portals, c.Target, c.LUN, c.AnyLUN = []string{"10.0.0.1", "10.0.0.2:3261"}, "iqn.2026-01.com.example:data", 3, false
	if err := WriteConfig(&c, false); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "data.conf")
	if c.Path != path {
		t.Fatalf("Path = %q, want %q", c.Path, path)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode() != 0o644 {
		t.Fatalf("%s: %v, %v; want mode 0644", path, fi, err)
	}
	got, err := LoadConfig("data")
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(*got, c) {
		t.Fatalf("loaded %+v\nwant   %+v", *got, c)
	}

	c2 := c
	c2.LUN = 4
	if err := WriteConfig(&c2, false); !errors.Is(err, fs.ErrExist) {
		t.Fatalf("second write without overwrite: %v", err)
	}
	if err := WriteConfig(&c2, true); err != nil {
		t.Fatal(err)
	}
	if got, _ := LoadConfig("data"); got == nil || got.LUN != 4 {
		t.Fatalf("overwrite did not take: %+v", got)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Fatalf("temporary files left behind: %v", ents)
	}

	bad := c
	bad.Name, bad.Target = "bad", ""
	if err := WriteConfig(&bad, false); err == nil {
		t.Fatal("an invalid config was written")
	}

	if err := RemoveConfig("data"); err != nil {
		t.Fatal(err)
	}
	_, err = LoadConfig("data")
	if !errors.Is(err, fs.ErrNotExist) || err.Error() != "no volume data: "+path+" does not exist" {
		t.Fatalf("LoadConfig after remove: %v", err)
	}
	if err := RemoveConfig("data"); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("second remove: %v", err)
	}
	if _, err := LoadConfig("../etc/passwd"); err == nil {
		t.Fatal("LoadConfig accepted a path as a name")
	}
}

func TestListConfigs(t *testing.T) {
	dir := tempConfigDir(t)
	if got, err := ListConfigs(); err != nil || len(got) != 0 {
		t.Fatalf("missing directory: %v, %v", got, err)
	}
	files := map[string]string{
		"b.conf":     minimalConf,
		"a.b.conf":   minimalConf,
		"a.conf":     minimalConf + "lun = 2\n",
		"bad.conf":   minimalConf + "lun = x\n",
		"worse.conf": "portal = 10.0.0.1\n",
		".tmp.conf":  "garbage",
		"notes.txt":  "garbage",
	}
	if err := os.MkdirAll(filepath.Join(dir, "sub.conf"), 0o755); err != nil {
		t.Fatal(err)
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := ListConfigs()
	var names []string
	for _, c := range got {
		names = append(names, c.Name)
	}
	if want := []string{"a", "a.b", "b"}; !reflect.DeepEqual(names, want) {
		t.Fatalf("names %v, want %v", names, want)
	}
	if got[0].LUN != 2 || got[0].Path != filepath.Join(dir, "a.conf") {
		t.Fatalf("a: %+v", got[0])
	}
	joined, ok := err.(interface{ Unwrap() []error })
	if !ok || len(joined.Unwrap()) != 2 {
		t.Fatalf("want two joined errors, got %v", err)
	}
	for i, want := range []struct {
		path string
		line int
	}{{"bad.conf", 3}, {"worse.conf", 0}} {
		var ce *ConfigError
		if !errors.As(joined.Unwrap()[i], &ce) || ce.Path != filepath.Join(dir, want.path) || ce.Line != want.line {
			t.Fatalf("error %d: %v, want %s line %d", i, joined.Unwrap()[i], want.path, want.line)
		}
	}
}

func FuzzParseConfig(f *testing.F) {
	f.Add([]byte(minimalConf))
	f.Add([]byte(minimalConf + "read_only = true\n"))
	f.Add([]byte("[volume]\r\nportal = [fe80::1%eth0]:3260\nportal = h,1\ntarget = naa.6001405abcdef\nlun = 7\nchap_user = u\nchap_secret_file = /s\nmutual_user = m\nmutual_secret_file = /m\n"))
	f.Add([]byte("; c\n# c\nportal=h\ntarget=eui.0123456789ABCDEF\nreplacement_timeout=0\nnop_interval=1h\nqueues=4096\n"))
	f.Add([]byte("portal = h\nportal = h:3260\n"))
	f.Add([]byte("lun = 99999\n= x\n[x\n"))
	f.Add([]byte("portl = h\ntarget = iqn.2026-01.x:y\nlun = 0\nTransport = tcp\nchap-user = u\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := ParseConfig("fuzz", "", bytes.NewReader(data))
		if err != nil {
			var ce *ConfigError
			if !errors.As(err, &ce) {
				t.Fatalf("error is not a *ConfigError: %v", err)
			}
			if ce.Line < 0 || ce.Line > bytes.Count(data, []byte("\n"))+1 {
				t.Fatalf("line %d out of range: %v", ce.Line, err)
			}
			return
		}
		out := c.Marshal()
		again, err := ParseConfig("fuzz", "", bytes.NewReader(out))
		if err != nil {
			t.Fatalf("marshalled config does not parse: %v\n%s", err, out)
		}
		if !reflect.DeepEqual(again, c) {
			t.Fatalf("round trip changed the config:\n%+v\n%+v", c, again)
		}
		if !bytes.Equal(again.Marshal(), out) {
			t.Fatalf("Marshal is not stable")
		}
	})
}

// TestParseConfigReportsEveryError: every problem of a file is reported,
// each as PATH:LINE: reason, in line order with whole-file problems last;
// a misspelt key gets a suggestion.
func TestParseConfigReportsEveryError(t *testing.T) {
	in := "portl = 10.0.0.1\n" +
		"target = iqn.2026-01.com.example:db\n" +
		"lun = x\n" +
		"transport = rdma\n" +
		"queue_deph = 4\n" +
		"chap_user = u\n"
	_, err := ParseConfig("db", "/etc/x/db.conf", strings.NewReader(in))
	var errs ConfigErrors
	if !errors.As(err, &errs) {
		t.Fatalf("want ConfigErrors, got %v", err)
	}
	want := []string{
		"/etc/x/db.conf:1: portl: unknown key (did you mean 'portal'?)",
		"/etc/x/db.conf:3: lun: \"x\": want a LUN from 0 to 16383",
		"/etc/x/db.conf:4: transport: \"rdma\": want auto, iser, tcp",
		"/etc/x/db.conf:5: queue_deph: unknown key (did you mean 'queue_depth'?)",
		"/etc/x/db.conf:6: chap_user: needs chap_secret_file",
		"/etc/x/db.conf:0: portal: no portal (portal = host[:port])",
	}
	if got := strings.Split(err.Error(), "\n"); !reflect.DeepEqual(got, want) {
		t.Fatalf("errors:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	var ce *ConfigError
	if !errors.As(err, &ce) || ce.Line != 1 || ce.Key != "portl" {
		t.Fatalf("errors.As finds %+v, want the first problem", ce)
	}
	// A present but invalid key is not reported missing as well.
	_, err = ParseConfig("db", "/etc/x/db.conf", strings.NewReader("portal = h\ntarget = disk1\n"))
	if got := err.Error(); strings.Contains(got, "no target") || strings.Count(got, "\n") != 0 {
		t.Fatalf("invalid target: %q", got)
	}
}

func TestNearestKey(t *testing.T) {
	for in, want := range map[string]string{
		"portl": "portal", "Portal": "portal", "Lun": "lun", "chap-user": "chap_user",
		"queue_deph": "queue_depth", "nop_intervall": "nop_interval", "logintimeout": "login_timeout",
		"lnu": "", "xyz": "", "frobnicate": "", "": "",
	} {
		if got := nearestKey(in); got != want {
			t.Errorf("nearestKey(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestParseConfigLUNOptional: without a lun key a volume means the
// target's lowest-numbered disk (AnyLUN), and Marshal writes no lun line
// for it; "lun = 0" is LUN 0 itself.
func TestParseConfigLUNOptional(t *testing.T) {
	c, err := ParseConfig("db", "", strings.NewReader(minimalConf))
	if err != nil || !c.AnyLUN {
		t.Fatalf("no lun key: %+v, %v; want AnyLUN", c, err)
	}
	if strings.Contains(string(c.Marshal()), "lun") {
		t.Fatalf("Marshal wrote a lun line:\n%s", c.Marshal())
	}
	c, err = ParseConfig("db", "", strings.NewReader(minimalConf+"lun = 0\n"))
	if err != nil || c.AnyLUN || c.LUN != 0 {
		t.Fatalf("lun = 0: %+v, %v", c, err)
	}
	if !strings.Contains(string(c.Marshal()), "lun = 0\n") {
		t.Fatalf("Marshal dropped lun = 0:\n%s", c.Marshal())
	}
}

// TestKeyLine: the line of a key's first occurrence, 0 without it.
func TestKeyLine(t *testing.T) {
	path := filepath.Join(t.TempDir(), "db.conf")
	if err := os.WriteFile(path, []byte("# chap_user = x\nportal = h\n\n  chap_user = u\nchap_user_x = y\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for key, want := range map[string]int{"portal": 2, "chap_user": 4, "target": 0} {
		if got := KeyLine(path, key); got != want {
			t.Errorf("KeyLine(%s) = %d, want %d", key, got, want)
		}
	}
	if got := KeyLine(path+".missing", "portal"); got != 0 {
		t.Errorf("KeyLine of a missing file = %d", got)
	}
}
