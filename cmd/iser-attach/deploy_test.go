package main

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"
	"go.yaml.in/yaml/v3"
)

// The Kubernetes manifests in deploy/kubernetes must run the binary as it is:
// every iser-attach container's arguments name a command and flags that
// exist, its --endpoint's socket lies in a directory the container mounts,
// and every CSI sidecar in the same pod dials that socket where it mounts
// the same volume.

type k8sManifest struct {
	Kind     string `yaml:"kind"`
	Metadata struct {
		Name string `yaml:"name"`
	} `yaml:"metadata"`
	Spec struct {
		Template struct {
			Spec podSpec `yaml:"spec"`
		} `yaml:"template"`
	} `yaml:"spec"`
}

type podSpec struct {
	Containers []k8sContainer `yaml:"containers"`
	Volumes    []struct {
		Name     string `yaml:"name"`
		HostPath *struct {
			Path string `yaml:"path"`
		} `yaml:"hostPath"`
	} `yaml:"volumes"`
}

type k8sContainer struct {
	Name         string   `yaml:"name"`
	Image        string   `yaml:"image"`
	Args         []string `yaml:"args"`
	VolumeMounts []struct {
		Name      string `yaml:"name"`
		MountPath string `yaml:"mountPath"`
	} `yaml:"volumeMounts"`
}

// mountOf returns the volume a container mounts at dir.
func (c k8sContainer) mountOf(dir string) (string, bool) {
	for _, m := range c.VolumeMounts {
		if path.Clean(m.MountPath) == path.Clean(dir) {
			return m.Name, true
		}
	}
	return "", false
}

// argValue returns --name's value in args (--name=value form).
func argValue(args []string, name string) (string, bool) {
	for _, a := range args {
		if v, ok := strings.CutPrefix(a, "--"+name+"="); ok {
			return v, true
		}
	}
	return "", false
}

func readManifests(t *testing.T) map[string][]k8sManifest {
	t.Helper()
	files, err := filepath.Glob("../../deploy/kubernetes/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests in deploy/kubernetes: %v", err)
	}
	out := map[string][]k8sManifest{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		dec := yaml.NewDecoder(bytes.NewReader(b))
		for {
			var m k8sManifest
			err := dec.Decode(&m)
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			out[filepath.Base(f)] = append(out[filepath.Base(f)], m)
		}
	}
	return out
}

// checkFlags fails unless every --flag in args is one of cmd's flags or the
// app's global flags, and every flag in required is given.
func checkFlags(t *testing.T, where string, app *cli.App, cmd *cli.Command, args []string, required []string) {
	t.Helper()
	known := map[string]bool{}
	for _, fl := range append(append([]cli.Flag{}, app.Flags...), cmd.Flags...) {
		for _, n := range fl.Names() {
			known[n] = true
		}
	}
	for _, a := range args {
		name, ok := strings.CutPrefix(a, "--")
		if !ok {
			t.Errorf("%s: argument %q after the command is not a --flag=value", where, a)
			continue
		}
		name, _, _ = strings.Cut(name, "=")
		if !known[name] {
			t.Errorf("%s: --%s is not a flag of iser-attach %s", where, name, cmd.Name)
		}
	}
	for _, r := range required {
		if _, ok := argValue(args, r); !ok {
			t.Errorf("%s: --%s=... missing", where, r)
		}
	}
}

func TestDeployManifestsMatchTheBinary(t *testing.T) {
	app := newApp()
	commands := map[string]*cli.Command{}
	for _, c := range app.Commands {
		commands[c.Name] = c
	}
	seen := 0
	for file, ms := range readManifests(t) {
		for _, m := range ms {
			if m.Kind != "Deployment" && m.Kind != "DaemonSet" {
				continue
			}
			pod := m.Spec.Template.Spec
			var endpoint, socketVolume, nodeSocket string
			for _, c := range pod.Containers {
				if !strings.HasPrefix(c.Image, "iser-attach") {
					continue
				}
				seen++
				where := file + ": " + m.Kind + " " + m.Metadata.Name + ", container " + c.Name
				if len(c.Args) == 0 || commands[c.Args[0]] == nil {
					t.Errorf("%s: args %q do not start with a command of iser-attach", where, c.Args)
					continue
				}
				cmd := commands[c.Args[0]]
				checkFlags(t, where, app, cmd, c.Args[1:], []string{"endpoint", "node-id", "state-dir"})
				ep, _ := argValue(c.Args, "endpoint")
				sock, ok := strings.CutPrefix(ep, "unix://")
				if !ok || !path.IsAbs(sock) {
					t.Errorf("%s: --endpoint=%q is not unix:///ABSOLUTE/PATH", where, ep)
					continue
				}
				vol, ok := c.mountOf(path.Dir(sock))
				if !ok {
					t.Errorf("%s: the socket's directory %s is not a volume the container mounts", where, path.Dir(sock))
				}
				for _, dirFlag := range []string{"state-dir"} {
					if d, ok := argValue(c.Args, dirFlag); ok {
						if _, ok := c.mountOf(d); !ok {
							t.Errorf("%s: --%s=%s is not a volume the container mounts (it would not survive the container)", where, dirFlag, d)
						}
					}
				}
				endpoint, socketVolume = sock, vol
				if m.Kind == "DaemonSet" {
					// kubelet finds the node plugin's socket on the host:
					// the registrar's path must be where the socket's
					// hostPath volume puts it.
					for _, v := range pod.Volumes {
						if v.Name == vol && v.HostPath != nil {
							nodeSocket = path.Join(v.HostPath.Path, path.Base(sock))
						}
					}
					if nodeSocket == "" {
						t.Errorf("%s: the socket's volume %q is not a hostPath: kubelet cannot reach it", where, vol)
					}
				}
			}
			if endpoint == "" {
				continue
			}
			for _, c := range pod.Containers {
				addr, ok := argValue(c.Args, "csi-address")
				if !ok {
					continue
				}
				where := file + ": " + m.Kind + " " + m.Metadata.Name + ", sidecar " + c.Name
				if reg, ok := argValue(c.Args, "kubelet-registration-path"); ok && reg != nodeSocket {
					t.Errorf("%s: --kubelet-registration-path=%s, the plugin's socket is %s on the host", where, reg, nodeSocket)
				}
				if vol, ok := c.mountOf(path.Dir(addr)); !ok || vol != socketVolume {
					t.Errorf("%s: --csi-address=%s is not in the volume %q that holds iser-attach's socket", where, addr, socketVolume)
				} else if path.Base(addr) != path.Base(endpoint) {
					t.Errorf("%s: --csi-address=%s, iser-attach listens on %s", where, addr, endpoint)
				}
			}
		}
	}
	if seen == 0 {
		t.Fatal("no iser-attach container in deploy/kubernetes")
	}
}
