package mailbox

import (
	"cmp"
	"crypto/tls"
	"errors"
	"fmt"
	"time"
)

// Config says how to reach the mailbox. Which folder a run reads, and up to when, is the
// run's own (Freeze's arguments); the snapshot remembers them for Read and Check.
type Config struct {
	Addr     string // host:port of the IMAP server
	User     string
	Password string
	// TLS, when set, is used from the first byte (IMAPS, usually port 993). Nil is plain
	// TCP: for a server on loopback or a network the host trusts.
	TLS         *tls.Config
	DialTimeout time.Duration // default 30s
}

func (c Config) withDefaults() Config {
	c.DialTimeout = cmp.Or(c.DialTimeout, 30*time.Second)
	return c
}

// Validate says what in c cannot work, one sentence per setting, before anything is dialled.
func (c Config) Validate() error {
	var errs []error
	if c.Addr == "" {
		errs = append(errs, errors.New("the mailbox address (Addr, host:port) is not set"))
	}
	if c.User == "" {
		errs = append(errs, errors.New("the mailbox user (User) is not set"))
	}
	if c.DialTimeout < 0 {
		errs = append(errs, fmt.Errorf("the mailbox dial timeout (DialTimeout) must not be negative, not %s", c.DialTimeout))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("%w: %w", ErrConfig, err)
	}
	return nil
}

// validFolder checks the folder a run names.
func validFolder(name string) error {
	if name == "" {
		return fmt.Errorf("%w: the folder to read is not set", ErrConfig)
	}
	return nil
}
