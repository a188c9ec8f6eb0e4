package main

import (
	"bufio"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/iser-attach/iser-attach/initiator"
)

const (
	openISCSINameFile = "/etc/iscsi/initiatorname.iscsi"
	generatedNameFile = "/var/lib/iser-attach/initiatorname"
)

// initiatorName returns the flag's value, open-iscsi's InitiatorName, or a
// generated IQN kept under /var/lib/iser-attach so it stays the same. A
// name that is not an iSCSI name (initiator.CheckName) is an error.
func initiatorName(flag string) (string, error) {
	if flag != "" {
		if err := initiator.CheckName(flag); err != nil {
			return "", fmt.Errorf("--initiator-name: %w", err)
		}
		return flag, nil
	}
	for _, file := range []string{openISCSINameFile, generatedNameFile} {
		if n := readNameFile(file); n != "" {
			if err := initiator.CheckName(n); err != nil {
				return "", fmt.Errorf("InitiatorName in %s: %w", file, err)
			}
			return n, nil
		}
	}
	var b [6]byte
	_, _ = rand.Read(b[:])
	host, _ := os.Hostname()
	host = strings.ToLower(strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '.' {
			return r
		}
		return '-'
	}, host))
	if host == "" {
		host = "host"
	}
	name := fmt.Sprintf("iqn.2026-11.io.iser-attach:%s-%s", host, hex.EncodeToString(b[:]))
	if err := os.MkdirAll(filepath.Dir(generatedNameFile), 0o755); err == nil {
		if err := os.WriteFile(generatedNameFile, []byte("InitiatorName="+name+"\n"), 0o644); err != nil {
			logger.Debug().Err(err).Msg("could not store the generated initiator name")
		}
	}
	return name, nil
}

func readNameFile(path string) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if v, ok := strings.CutPrefix(line, "InitiatorName="); ok && v != "" {
			return v
		}
	}
	return ""
}
