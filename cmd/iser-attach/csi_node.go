package main

// csi_node.go: the CSI Node service's attacher. A volume is attached by
// running this binary's own "attach --daemon" with the pool file's
// connection keys and the volume ID's target and LUN: the daemon outlives
// the plugin, as any attach --daemon does, and is found, asked and detached
// through its control socket in /run/iser-attach as list, resize and detach
// do.

import (
	"bytes"
	"context"
	"crypto/sha256"
	be "encoding/binary"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/iser-attach/iser-attach/csi"
	"github.com/iser-attach/iser-attach/volume"
)

// nodeAttacher implements csi.Attacher.
type nodeAttacher struct {
	exe       string         // this binary
	cfg       *volume.Config // the pool file
	initiator string         // the initiator name to log in with
	// frontend is ublk or nbd; "" picks ublk where it works, else nbd.
	frontend string
	// key fences every read-write stage (attach --reservation-key); 0 none.
	key uint64
}

// nodeKey is a node's persistent reservation key: the first 8 bytes of
// SHA-256 of its node ID (never 0), so that a restarted plugin, or one on
// another host with the same node ID, uses the same key.
func nodeKey(nodeID string) uint64 {
	h := sha256.Sum256([]byte("iser-attach csi node\x00" + nodeID))
	if k := be.BigEndian.Uint64(h[:8]); k != 0 {
		return k
	}
	return 1
}

// attachArgs is the attach --daemon command line of a volume of the pool.
func (a *nodeAttacher) attachArgs(name, frontend string, id csi.VolumeID, readOnly bool) []string {
	c := a.cfg
	args := []string{"--initiator-name", a.initiator, "attach", "--daemon", "--frontend", frontend, "--name", name,
		"--target", id.Target, "--lun", strconv.Itoa(int(id.LUN)), "--transport", c.Transport,
		"--queue-depth", strconv.Itoa(c.QueueDepth), "--login-timeout", c.LoginTimeout.String(),
		"--command-timeout", c.CommandTimeout.String(), "--replacement-timeout", c.ReplacementTimeout.String(),
		"--nop-interval", c.NOPInterval.String(), "--nop-timeout", c.NOPTimeout.String()}
	for _, p := range c.Portals {
		args = append(args, "--portal", p)
	}
	if c.PathSelector != "" {
		args = append(args, "--path-selector", c.PathSelector)
	}
	if c.NoPathTimeout >= 0 {
		args = append(args, "--no-path-timeout", c.NoPathTimeout.String())
	}
	if c.AllPortals {
		args = append(args, "--all-portals")
	}
	for _, kv := range [][2]string{{"chap-user", c.CHAPUser}, {"chap-secret-file", c.CHAPSecretFile},
		{"mutual-user", c.MutualUser}, {"mutual-secret-file", c.MutualSecretFile}} {
		if kv[1] != "" {
			args = append(args, "--"+kv[0], kv[1])
		}
	}
	if readOnly || c.ReadOnly {
		args = append(args, "--read-only")
	} else if a.key != 0 {
		args = append(args, "--reservation-key", fmt.Sprintf("%016x", a.key))
	}
	return args
}

// pickFrontend is ublk where the kernel has it, else kernel NBD.
func (a *nodeAttacher) pickFrontend(ctx context.Context) (string, error) {
	if a.frontend != "" {
		return a.frontend, checkFrontend(ctx, a.frontend)
	}
	uerr := checkFrontend(ctx, "ublk")
	if uerr == nil {
		return "ublk", nil
	}
	if nerr := checkFrontend(ctx, "nbd"); nerr != nil {
		return "", fmt.Errorf("no frontend: %w; %w", uerr, nerr)
	}
	return "nbd", nil
}

// status asks the daemon of name; found is false when no daemon answers.
func (a *nodeAttacher) status(ctx context.Context, name string) (volume.Status, bool) {
	qctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	resp, err := volume.Query(qctx, volume.SocketPath(name), volume.Request{Op: "status"})
	if err != nil || resp.Status == nil {
		return volume.Status{}, false
	}
	return *resp.Status, true
}

// Attach implements csi.Attacher.
func (a *nodeAttacher) Attach(ctx context.Context, name string, id csi.VolumeID, readOnly bool) (string, error) {
	// The pool's credentials are for its target only.
	if id.Target != a.cfg.Target {
		return "", fmt.Errorf("attach: target %s: %w (%s)", id.Target, csi.ErrNotInPool, a.cfg.Target)
	}
	st, found := a.status(ctx, name)
	if !found {
		fe, err := a.pickFrontend(ctx)
		if err != nil {
			return "", fmt.Errorf("attach: %w", err)
		}
		var stderr bytes.Buffer
		cmd := exec.CommandContext(ctx, a.exe, a.attachArgs(name, fe, id, readOnly)...)
		cmd.Stderr = &stderr
		start := time.Now()
		out, err := cmd.Output()
		if err != nil {
			lines := strings.Split(strings.TrimSpace(stderr.String()), "\n")
			var ee *exec.ExitError
			if errors.As(err, &ee) && ee.ExitCode() == exitReserved {
				err = csi.ErrReserved
			}
			return "", fmt.Errorf("attach LUN %d of %s: %w: %s", id.LUN, id.Target, err, lines[len(lines)-1])
		}
		logger.Info().Str("volume", name).Str("device", strings.TrimSpace(string(out))).Str("frontend", fe).
			Dur("took", time.Since(start)).Msg("csi: attached")
		if st, found = a.status(ctx, name); !found {
			return "", fmt.Errorf("attach LUN %d of %s: the daemon of %s does not answer", id.LUN, id.Target, name)
		}
	}
	if st.WWN != id.LUID || st.LUN != id.LUN || st.Target != id.Target {
		err := fmt.Errorf("attach: %s is LUN %d (%s) of %s, the volume is LUN %d (%s) of %s: %w",
			name, st.LUN, st.WWN, st.Target, id.LUN, id.LUID, id.Target, csi.ErrWrongLU)
		if derr := a.Detach(ctx, name); derr != nil {
			return "", fmt.Errorf("%w; detach: %w", err, derr)
		}
		return "", err
	}
	return st.Device, nil
}

// Detach implements csi.Attacher: detach's control-socket call, without
// force (the caller checked the device is not in use).
func (a *nodeAttacher) Detach(ctx context.Context, name string) error {
	if _, found := a.status(ctx, name); !found {
		return nil
	}
	resp, err := volume.Query(ctx, volume.SocketPath(name), volume.Request{Op: "detach"})
	if err != nil {
		return fmt.Errorf("detach %s: %w", name, err)
	}
	if !resp.OK {
		return fmt.Errorf("detach %s: %s", name, resp.Error)
	}
	// The daemon exits after its answer; wait for its socket to go.
	for end := time.Now().Add(30 * time.Second); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		if _, err := os.Stat(volume.SocketPath(name)); errors.Is(err, os.ErrNotExist) {
			break
		}
	}
	return nil
}

// Volume implements csi.Attacher.
func (a *nodeAttacher) Volume(ctx context.Context, name string) (csi.AttachedVolume, bool, error) {
	st, found := a.status(ctx, name)
	if !found {
		return csi.AttachedVolume{}, false, nil
	}
	v := csi.AttachedVolume{Device: st.Device, State: st.State, Paths: len(st.Paths), LastError: st.LastError}
	for _, p := range st.Paths {
		if p.State == "up" {
			v.PathsUp++
		}
	}
	return v, true, nil
}

// Resize implements csi.Attacher: resize's control-socket call.
func (a *nodeAttacher) Resize(ctx context.Context, name string) (int64, error) {
	resp, err := volume.Query(ctx, volume.SocketPath(name), volume.Request{Op: "resize"})
	if err != nil {
		return 0, fmt.Errorf("resize %s: %w", name, err)
	}
	if !resp.OK || resp.Resize == nil {
		if strings.Contains(resp.Error, "UBLK_F_UPDATE_SIZE") || strings.Contains(resp.Error, errNoResizeFrontend.Error()) {
			return 0, fmt.Errorf("resize %s: %s: %w", name, resp.Error, csi.ErrNoResize)
		}
		return 0, fmt.Errorf("resize %s: %s", name, resp.Error)
	}
	return resp.Resize.NewSize, nil
}
