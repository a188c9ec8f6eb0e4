package volume

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func tempLinkDir(t *testing.T) string {
	t.Helper()
	old := LinkDir
	LinkDir = filepath.Join(t.TempDir(), "iser")
	t.Cleanup(func() { LinkDir = old })
	return LinkDir
}

func readLink(t *testing.T, path string) string {
	t.Helper()
	target, err := os.Readlink(path)
	if err != nil {
		return ""
	}
	return target
}

func TestLinks(t *testing.T) {
	dir := tempLinkDir(t)
	const wwn = "naa.6001405abcdef0123456789abcdef01"
	byName, byWWN := filepath.Join(dir, "db"), filepath.Join(dir, "by-wwn", wwn)

	if err := CreateLinks("db", "/dev/ublkb0", wwn); err != nil {
		t.Fatal(err)
	}
	if readLink(t, byName) != "/dev/ublkb0" || readLink(t, byWWN) != "/dev/ublkb0" {
		t.Fatalf("links: %q, %q", readLink(t, byName), readLink(t, byWWN))
	}
	// A new attach replaces the links.
	if err := CreateLinks("db", "/dev/nbd1", wwn); err != nil {
		t.Fatal(err)
	}
	if readLink(t, byName) != "/dev/nbd1" || readLink(t, byWWN) != "/dev/nbd1" {
		t.Fatalf("replaced links: %q, %q", readLink(t, byName), readLink(t, byWWN))
	}
	// The old device's detach leaves them alone.
	if err := RemoveLinks("db", "/dev/ublkb0", wwn); err != nil {
		t.Fatal(err)
	}
	if readLink(t, byName) != "/dev/nbd1" || readLink(t, byWWN) != "/dev/nbd1" {
		t.Fatal("RemoveLinks removed links of another device")
	}
	if err := RemoveLinks("db", "/dev/nbd1", wwn); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{byName, byWWN} {
		if _, err := os.Lstat(p); !os.IsNotExist(err) {
			t.Fatalf("%s still there: %v", p, err)
		}
	}
	// Removing again, or links never made, is fine.
	if err := RemoveLinks("db", "/dev/nbd1", wwn); err != nil {
		t.Fatal(err)
	}
	// No WWN: the name only.
	if err := CreateLinks("other", "/dev/ublkb2", ""); err != nil {
		t.Fatal(err)
	}
	if readLink(t, filepath.Join(dir, "other")) != "/dev/ublkb2" {
		t.Fatal("no link by name")
	}
	ents, _ := os.ReadDir(filepath.Join(dir, "by-wwn"))
	if len(ents) != 0 {
		t.Fatalf("by-wwn holds %v", ents)
	}
	ents, _ = os.ReadDir(dir)
	for _, e := range ents {
		if e.Name()[0] == '.' {
			t.Fatalf("temporary link left: %s", e.Name())
		}
	}
}

func TestLinksReject(t *testing.T) {
	tempLinkDir(t)
	for _, tt := range []struct{ name, dev, wwn string }{
		{"../x", "/dev/ublkb0", ""},
		{"", "/dev/ublkb0", ""},
		{"db", "ublkb0", ""},
		{"db", "/dev/ublkb0", "naa.1/../../etc"},
		{"db", "/dev/ublkb0", ".."},
		{"db", "/dev/ublkb0", "."},
		{"db", "/dev/ublkb0", "a..b"},
	} {
		if err := CreateLinks(tt.name, tt.dev, tt.wwn); err == nil {
			t.Errorf("CreateLinks(%q, %q, %q) accepted", tt.name, tt.dev, tt.wwn)
		}
	}
	if err := RemoveLinks("db", "/dev/ublkb0", "x/y"); err == nil {
		t.Error("RemoveLinks accepted a WWN with '/'")
	}
}

// udev rewrites /dev/iser/NAME as ../ublkb0; detach still removes it.
func TestRemoveLinksRelative(t *testing.T) {
	dir := tempLinkDir(t)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	dev := filepath.Join(filepath.Dir(dir), "ublkb0")
	link := filepath.Join(dir, "db")
	if err := os.Symlink("../ublkb0", link); err != nil {
		t.Fatal(err)
	}
	if err := RemoveLinks("db", filepath.Join(filepath.Dir(dir), "ublkb1"), ""); err != nil || readLink(t, link) == "" {
		t.Fatalf("removed a relative link to another device: %v", err)
	}
	if err := RemoveLinks("db", dev, ""); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(link); !os.IsNotExist(err) {
		t.Fatalf("relative link still there: %v", err)
	}
}

// A server killed before it removed its links leaves /dev/iser/OLD ->
// /dev/ublkb0; the kernel then gives ublkb0 to another volume. Its attach
// must not leave the old name leading to its disk.
func TestCreateLinksDropsStaleLinksToTheDevice(t *testing.T) {
	dir := tempLinkDir(t)
	const oldWWN, newWWN = "naa.6001405000000000000000000000old", "naa.6001405000000000000000000000new"
	if err := CreateLinks("old", "/dev/ublkb0", oldWWN); err != nil {
		t.Fatal(err)
	}
	if err := CreateLinks("keep", "/dev/ublkb1", ""); err != nil {
		t.Fatal(err)
	}
	// udev's relative form of a stale link, too.
	if err := os.Symlink("../ublkb0", filepath.Join(dir, "relative")); err != nil {
		t.Fatal(err)
	}
	relDev := filepath.Join(filepath.Dir(dir), "ublkb0")
	if err := CreateLinks("new", relDev, newWWN); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(filepath.Join(dir, "relative")); !os.IsNotExist(err) {
		t.Fatalf("relative stale link to %s kept: %v", relDev, err)
	}
	if err := CreateLinks("new", "/dev/ublkb0", newWWN); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{filepath.Join(dir, "old"), filepath.Join(dir, "by-wwn", oldWWN)} {
		if _, err := os.Lstat(p); !os.IsNotExist(err) {
			t.Fatalf("stale link %s -> %q kept", p, readLink(t, p))
		}
	}
	if readLink(t, filepath.Join(dir, "new")) != "/dev/ublkb0" || readLink(t, filepath.Join(dir, "by-wwn", newWWN)) != "/dev/ublkb0" {
		t.Fatal("the new links are wrong")
	}
	if readLink(t, filepath.Join(dir, "keep")) != "/dev/ublkb1" {
		t.Fatal("a link to another device was removed")
	}
}

// detach and status find a volume by its stable name only while the link
// leads to that volume's device: a stale link leading to another volume's
// device (or to none) finds nothing.
func TestFindByLinkTrustsOnlyLiveLinks(t *testing.T) {
	tempRunDir(t)
	dir := tempLinkDir(t)
	const wwnA, wwnB = "naa.60014050000000000000000000000a", "naa.60014050000000000000000000000b"
	s, err := ListenControl("b", &fakeController{st: Status{Name: "b", Device: "/dev/ublkb0", WWN: wwnB}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	// a's server was killed: its links stayed; b got ublkb0 since. c's device is gone.
	for name, dev := range map[string]string{"a": "/dev/ublkb0", "b": "/dev/ublkb0", "c": "/dev/ublkb5",
		"by-wwn/" + wwnA: "/dev/ublkb0", "by-wwn/" + wwnB: "/dev/ublkb0"} {
		if err := replaceLink(dev, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	for _, link := range []string{"b", "by-wwn/" + wwnB} {
		if _, st, err := Find(ctx2(t), filepath.Join(dir, link)); err != nil || st.Name != "b" {
			t.Errorf("find %s: %v %+v", link, err, st)
		}
	}
	for link, want := range map[string]string{"a": "which volume b is attached as", "by-wwn/" + wwnA: "which volume b is attached as",
		"c": "no attached volume is /dev/ublkb5", "none": "is not a link"} {
		if _, st, err := Find(ctx2(t), filepath.Join(dir, link)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("find %s: %v %+v, want an error with %q", link, err, st, want)
		}
	}
}
