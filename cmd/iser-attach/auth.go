package main

import (
	"errors"
	"fmt"
	"io"
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

// readSecretFile reads a secret file: its content without trailing line
// ends. It fails when the file cannot be read or holds no secret. The
// warning, when not empty, says the file is readable by others: every
// command that reads a secret file reports it, and goes on, the same way
// (volume add and volume check refuse any file that is not private).
func readSecretFile(path string) (secret []byte, warning string, err error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, "", err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, "", err
	}
	b, err := io.ReadAll(io.LimitReader(f, maxSecretFile+1))
	if err != nil {
		return nil, "", err
	}
	if len(b) > maxSecretFile {
		return nil, "", fmt.Errorf("%s is larger than %d bytes", path, maxSecretFile)
	}
	s := strings.TrimRight(string(b), "\r\n")
	if s == "" {
		return nil, "", fmt.Errorf("%s is empty", path)
	}
	if fi.Mode().IsRegular() && fi.Mode().Perm()&0o004 != 0 {
		warning = fmt.Sprintf("%s is world-readable (chmod o-r %s)", path, path)
	}
	return []byte(s), warning, nil
}

// maxSecretFile bounds a secret file: CHAP binary values are at most 1024
// bytes (RFC 7143 section 12.1.3), so anything much larger is the wrong file.
const maxSecretFile = 64 << 10

// readSecret reads a secret from file or, without one, from the environment
// variable env (when env is set); it warns on w as readSecretFile says.
func readSecret(w io.Writer, file, env, what string) ([]byte, error) {
	if file != "" {
		b, warning, err := readSecretFile(file)
		if err != nil {
			return nil, fmt.Errorf("%s file: %w", what, err)
		}
		if warning != "" {
			fmt.Fprintf(w, "warning: %s file %s\n", what, warning)
		}
		return b, nil
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
// A combination of flags that does not make credentials is a usage error.
func chapFromFlags(c *cli.Context) (*initiator.CHAPCredentials, error) {
	creds, err := chapCredentials(c.App.ErrWriter, c.String("chap-user"), c.String("chap-secret-file"),
		c.String("mutual-user"), c.String("mutual-secret-file"), true)
	var ce *chapComboError
	if errors.As(err, &ce) {
		return nil, usageErrorf(c, "%v", err)
	}
	return creds, err
}

// chapComboError is a combination of CHAP settings that makes no
// credentials (a secret without a user, mutual CHAP without one-way CHAP).
type chapComboError struct{ msg string }

func (e *chapComboError) Error() string { return e.msg }

// chapCredentials reads the secrets (from the files, or with env from the
// environment), warning on w about secret files others can read, and checks
// the combination.
func chapCredentials(w io.Writer, user, secretFile, mutualUser, mutualFile string, env bool) (*initiator.CHAPCredentials, error) {
	secretEnv, mutualEnv := "ISER_ATTACH_CHAP_SECRET", "ISER_ATTACH_MUTUAL_SECRET"
	if !env {
		secretEnv, mutualEnv = "", ""
	}
	if user == "" {
		if mutualUser != "" || mutualFile != "" {
			return nil, &chapComboError{"mutual CHAP needs --chap-user and a CHAP secret too"}
		}
		if secretFile != "" {
			return nil, &chapComboError{"--chap-secret-file given without --chap-user"}
		}
		return nil, nil
	}
	secret, err := readSecret(w, secretFile, secretEnv, "CHAP secret")
	if err != nil {
		return nil, err
	}
	mutual, err := readSecret(w, mutualFile, mutualEnv, "mutual CHAP secret")
	if err != nil {
		return nil, err
	}
	if len(secret) == 0 {
		return nil, &chapComboError{fmt.Sprintf("--chap-user %q needs a secret: --chap-secret-file or ISER_ATTACH_CHAP_SECRET", user)}
	}
	creds := &initiator.CHAPCredentials{User: user, Secret: secret}
	if mutualUser != "" || len(mutual) > 0 {
		if mutualUser == "" || len(mutual) == 0 {
			return nil, &chapComboError{"mutual CHAP needs both --mutual-user and a secret (--mutual-secret-file or ISER_ATTACH_MUTUAL_SECRET)"}
		}
		creds.MutualUser, creds.MutualSecret = mutualUser, mutual
	}
	if err := creds.Validate(); err != nil {
		return nil, err
	}
	return creds, nil
}
