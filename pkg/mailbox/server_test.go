package mailbox_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"log"
	"net"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/emersion/go-imap/v2"
	"github.com/emersion/go-imap/v2/imapclient"
	"github.com/emersion/go-imap/v2/imapserver"
	"github.com/emersion/go-imap/v2/imapserver/imapmemserver"
	"github.com/emersion/go-message/mail"

	"github.com/cairnhq/cairn/pkg/mailbox"
)

const (
	user     = "ap@parts.example"
	password = "s3cret"
)

// server is an in-process IMAP server (go-imap's imapmemserver) on a loopback port, with
// one user; stop closes it and every connection. accepted counts the connections it took.
type server struct {
	Addr     string
	accepted *atomic.Int64
	stop     func()
}

// countingListener counts the connections it accepts.
type countingListener struct {
	net.Listener
	n *atomic.Int64
}

func (l countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.n.Add(1)
	}
	return c, err
}

func startServer() (*server, error) {
	mem := imapmemserver.New()
	mem.AddUser(imapmemserver.NewUser(user, password))
	srv := imapserver.New(&imapserver.Options{
		NewSession: func(*imapserver.Conn) (imapserver.Session, *imapserver.GreetingData, error) {
			return mem.NewSession(), nil, nil
		},
		Caps:         imap.CapSet{imap.CapIMAP4rev1: {}, imap.CapUIDPlus: {}},
		InsecureAuth: true, // plain TCP on loopback
		Logger:       log.New(io.Discard, "", 0),
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	n := new(atomic.Int64)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(countingListener{ln, n})
	}()
	return &server{Addr: ln.Addr().String(), accepted: n, stop: func() { srv.Close(); <-done }}, nil
}

func (s *server) config() mailbox.Config {
	return mailbox.Config{Addr: s.Addr, User: user, Password: password}
}

// postmaster is a second client, the one that changes the mailbox under the run (as the
// mail server's delivery and a person with a mail program would): it appends, flags,
// expunges, deletes and creates folders. The package under test never does.
type postmaster struct {
	t  testing.TB
	cl *imapclient.Client
}

func dialPostmaster(t testing.TB, addr string) *postmaster {
	t.Helper()
	cl, err := imapclient.DialInsecure(addr, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })
	if err := cl.Login(user, password).Wait(); err != nil {
		t.Fatal(err)
	}
	return &postmaster{t: t, cl: cl}
}

func (p *postmaster) create(folder string) {
	p.t.Helper()
	if err := p.cl.Create(folder, nil).Wait(); err != nil {
		p.t.Fatalf("creating %s: %v", folder, err)
	}
}

func (p *postmaster) delete(folder string) {
	p.t.Helper()
	if err := p.cl.Delete(folder).Wait(); err != nil {
		p.t.Fatalf("deleting %s: %v", folder, err)
	}
}

// deliver appends raw to folder as received at date, and returns its UID.
func (p *postmaster) deliver(folder string, raw []byte, date time.Time) uint32 {
	p.t.Helper()
	cmd := p.cl.Append(folder, int64(len(raw)), &imap.AppendOptions{Time: date})
	if _, err := cmd.Write(raw); err != nil {
		p.t.Fatal(err)
	}
	if err := cmd.Close(); err != nil {
		p.t.Fatal(err)
	}
	data, err := cmd.Wait()
	if err != nil {
		p.t.Fatalf("appending to %s: %v", folder, err)
	}
	return uint32(data.UID)
}

// expunge removes message uid of folder (flag \Deleted, then EXPUNGE).
func (p *postmaster) expunge(folder string, uid uint32) {
	p.t.Helper()
	p.inFolder(folder, false, func() error {
		flags := &imap.StoreFlags{Op: imap.StoreFlagsAdd, Flags: []imap.Flag{imap.FlagDeleted}, Silent: true}
		if err := p.cl.Store(imap.UIDSetNum(imap.UID(uid)), flags, nil).Close(); err != nil {
			return err
		}
		return p.cl.Expunge().Close()
	})
}

// read marks message uid of folder \Seen, as a person opening it would.
func (p *postmaster) read(folder string, uid uint32) {
	p.t.Helper()
	p.inFolder(folder, false, func() error {
		flags := &imap.StoreFlags{Op: imap.StoreFlagsAdd, Flags: []imap.Flag{imap.FlagSeen}, Silent: true}
		return p.cl.Store(imap.UIDSetNum(imap.UID(uid)), flags, nil).Close()
	})
}

// state is every message of folder by UID: its flags, INTERNALDATE and the digest of its
// bytes, read without changing them (EXAMINE, BODY.PEEK).
func (p *postmaster) state(folder string) map[uint32]string {
	p.t.Helper()
	out := map[uint32]string{}
	p.inFolder(folder, true, func() error {
		whole := &imap.FetchItemBodySection{Peek: true}
		all := imap.UIDSet{imap.UIDRange{Start: 1, Stop: 0}}
		msgs, err := p.cl.Fetch(all, &imap.FetchOptions{UID: true, Flags: true, InternalDate: true, BodySection: []*imap.FetchItemBodySection{whole}}).Collect()
		for _, m := range msgs {
			flags := make([]string, len(m.Flags))
			for i, f := range m.Flags {
				flags[i] = string(f)
			}
			slices.Sort(flags)
			sum := sha256.Sum256(m.FindBodySection(whole))
			out[uint32(m.UID)] = fmt.Sprintf("flags=[%s] date=%s body=%s", strings.Join(flags, " "), m.InternalDate.UTC().Format(time.RFC3339), hex.EncodeToString(sum[:8]))
		}
		return err
	})
	return out
}

func (p *postmaster) inFolder(folder string, readOnly bool, do func() error) {
	p.t.Helper()
	sel, err := p.cl.Select(folder, &imap.SelectOptions{ReadOnly: readOnly}).Wait()
	if err != nil {
		p.t.Fatalf("selecting %s: %v", folder, err)
	}
	if sel.NumMessages > 0 {
		err = do()
	}
	if uerr := p.cl.Unselect().Wait(); err == nil {
		err = uerr
	}
	if err != nil {
		p.t.Fatalf("in %s: %v", folder, err)
	}
}

// file is one attachment a test puts in a mail.
type file struct {
	name, contentType string
	data              []byte
}

// letter is a mail with a short text and files attached, built with go-message's writer.
func letter(subject string, files ...file) []byte {
	var h mail.Header
	h.SetDate(time.Date(2026, 5, 4, 9, 0, 0, 0, time.UTC))
	h.SetAddressList("From", []*mail.Address{{Name: "Supplier", Address: "billing@supplier.example"}})
	h.SetAddressList("To", []*mail.Address{{Address: user}})
	h.SetSubject(subject)
	var b bytes.Buffer
	w, err := mail.CreateWriter(&b, h)
	if err != nil {
		panic(err)
	}
	tw, err := w.CreateInline()
	if err != nil {
		panic(err)
	}
	var th mail.InlineHeader
	th.Set("Content-Type", "text/plain; charset=utf-8")
	pw, err := tw.CreatePart(th)
	if err != nil {
		panic(err)
	}
	fmt.Fprintf(pw, "Please find attached: %s.\r\n", subject)
	pw.Close()
	tw.Close()
	for _, f := range files {
		var ah mail.AttachmentHeader
		ah.Set("Content-Type", f.contentType)
		ah.SetFilename(f.name)
		aw, err := w.CreateAttachment(ah)
		if err != nil {
			panic(err)
		}
		aw.Write(f.data)
		aw.Close()
	}
	w.Close()
	return b.Bytes()
}

// pdf is a stand-in for an invoice's PDF: bytes that are not text.
func pdf(number string) file {
	data := append([]byte("%PDF-1.7\n\x00\xff\xfe"), []byte("invoice "+number)...)
	return file{name: "invoice-" + number + ".pdf", contentType: "application/pdf", data: data}
}

// deliverMay creates folder and delivers mails to it, one a day from the 4th of May, as
// the mail server would (for the examples, which have no testing.T).
func deliverMay(addr, folder string, mails ...[]byte) error {
	cl, err := imapclient.DialInsecure(addr, nil)
	if err != nil {
		return err
	}
	defer cl.Close()
	if err := cl.Login(user, password).Wait(); err != nil {
		return err
	}
	if err := cl.Create(folder, nil).Wait(); err != nil {
		return err
	}
	for i, raw := range mails {
		cmd := cl.Append(folder, int64(len(raw)), &imap.AppendOptions{Time: time.Date(2026, 5, 4+i, 9, 0, 0, 0, time.UTC)})
		if _, err := cmd.Write(raw); err != nil {
			return err
		}
		if err := cmd.Close(); err != nil {
			return err
		}
		if _, err := cmd.Wait(); err != nil {
			return err
		}
	}
	return cl.Logout().Wait()
}
