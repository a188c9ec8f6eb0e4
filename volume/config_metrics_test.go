package volume

import (
	"bytes"
	"errors"
	"strings"
	"testing"
)

func TestConfigMetricsListen(t *testing.T) {
	for _, v := range []string{"tcp:127.0.0.1:9464", "tcp::9464", "tcp:[::1]:9464", "tcp:metrics.example:80", "unix:/run/iser-attach/db.metrics"} {
		c, err := ParseConfig("db", "", strings.NewReader(minimalConf+"metrics_listen = "+v+"\n"))
		if err != nil {
			t.Fatalf("%s: %v", v, err)
		}
		if c.MetricsListen != v {
			t.Fatalf("%s: MetricsListen %q", v, c.MetricsListen)
		}
		again, err := ParseConfig("db", "", bytes.NewReader(c.Marshal()))
		if err != nil || again.MetricsListen != v {
			t.Fatalf("%s: round trip: %v %+v\n%s", v, err, again, c.Marshal())
		}
	}
	if c, err := ParseConfig("db", "", strings.NewReader(minimalConf)); err != nil || c.MetricsListen != "" ||
		bytes.Contains(c.Marshal(), []byte("metrics_listen")) {
		t.Fatalf("default: %v %+v", err, c)
	}
	for _, bad := range []string{"127.0.0.1:9464", "tcp:127.0.0.1", "tcp:127.0.0.1:0", "tcp:127.0.0.1:65536",
		"tcp:127.0.0.1:http", "unix:metrics.sock", "udp:127.0.0.1:9464", "tcp:"} {
		_, err := ParseConfig("db", "db.conf", strings.NewReader(minimalConf+"metrics_listen = "+bad+"\n"))
		var ce *ConfigError
		if !errors.As(err, &ce) || ce.Line != 3 || ce.Key != "metrics_listen" || !strings.Contains(ce.Reason, "want tcp:HOST:PORT or unix:/PATH") {
			t.Errorf("%q: %v", bad, err)
		}
	}
}
