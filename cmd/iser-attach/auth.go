package main

import (
	"fmt"
	"os"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/iser-attach/iser-attach/initiator"
)

// authFlags are accepted by every command that logs in. Secrets come from
// files or the environment, never from the command line, and are never logged.
func authFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "chap-user", Usage: "CHAP user name (one-way CHAP)"},
		&cli.StringFlag{Name: "chap-secret-file", Usage: "file holding the CHAP secret (or set ISER_ATTACH_CHAP_SECRET)"},
		&cli.StringFlag{Name: "mutual-user", Usage: "user name the target must answer with (mutual CHAP)"},
		&cli.StringFlag{Name: "mutual-secret-file", Usage: "file holding the target's secret (or set ISER_ATTACH_MUTUAL_SECRET)"},
	}
}

func readSecret(file, env, what string) ([]byte, error) {
	if file != "" {
		b, err := os.ReadFile(file)
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", what, err)
		}
		s := strings.TrimRight(string(b), "\r\n")
		if s == "" {
			return nil, fmt.Errorf("%s file %s is empty", what, file)
		}
		return []byte(s), nil
	}
	if env == "" {
		return nil, nil
	}
	if v := os.Getenv(env); v != "" {
		return []byte(v), nil
	}
	return nil, nil
}

// chapFromFlags builds CHAP credentials, or nil when no CHAP user is given.
func chapFromFlags(c *cli.Context) (*initiator.CHAPCredentials, error) {
	return chapCredentials(c.String("chap-user"), c.String("chap-secret-file"),
		c.String("mutual-user"), c.String("mutual-secret-file"), true)
}

// chapCredentials reads the secrets (from the files, or with env from the
// environment) and checks the combination.
func chapCredentials(user, secretFile, mutualUser, mutualFile string, env bool) (*initiator.CHAPCredentials, error) {
	secretEnv, mutualEnv := "ISER_ATTACH_CHAP_SECRET", "ISER_ATTACH_MUTUAL_SECRET"
	if !env {
		secretEnv, mutualEnv = "", ""
	}
	secret, err := readSecret(secretFile, secretEnv, "CHAP secret")
	if err != nil {
		return nil, err
	}
	mutual, err := readSecret(mutualFile, mutualEnv, "mutual CHAP secret")
	if err != nil {
		return nil, err
	}
	if user == "" {
		if mutualUser != "" || mutualFile != "" {
			return nil, fmt.Errorf("mutual CHAP needs --chap-user and a CHAP secret too")
		}
		if secretFile != "" {
			return nil, fmt.Errorf("--chap-secret-file given without --chap-user")
		}
		return nil, nil
	}
	if len(secret) == 0 {
		return nil, fmt.Errorf("--chap-user %q needs a secret: --chap-secret-file or ISER_ATTACH_CHAP_SECRET", user)
	}
	creds := &initiator.CHAPCredentials{User: user, Secret: secret}
	if mutualUser != "" || len(mutual) > 0 {
		if mutualUser == "" || len(mutual) == 0 {
			return nil, fmt.Errorf("mutual CHAP needs both --mutual-user and a secret (--mutual-secret-file or ISER_ATTACH_MUTUAL_SECRET)")
		}
		creds.MutualUser, creds.MutualSecret = mutualUser, mutual
	}
	return creds, nil
}
