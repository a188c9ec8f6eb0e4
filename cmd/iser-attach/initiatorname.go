package main

import (
	"bufio"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

const (
	openISCSINameFile = "/etc/iscsi/initiatorname.iscsi"
	generatedNameFile = "/var/lib/iser-attach/initiatorname"
)

// initiatorName returns the flag's value, open-iscsi's InitiatorName, or a
// generated IQN kept under /var/lib/iser-attach so it stays the same.
func initiatorName(flag string) (string, error) {
	if flag != "" {
		return flag, nil
	}
	if n := readNameFile(openISCSINameFile); n != "" {
		return n, nil
	}
	if n := readNameFile(generatedNameFile); n != "" {
		return n, nil
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
