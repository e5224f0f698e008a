package night

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"
	"sync"

	"github.com/cairnhq/cairn/pkg/artifacts"
	"github.com/cairnhq/cairn/pkg/assets"
	kc "github.com/cairnhq/cairn/pkg/kvcheckpoint"
	"github.com/cairnhq/cairn/pkg/runner"
)

// A big night's outputs would run to tens of megabytes: a list of every document, invoice
// or line. Held whole, encoded whole and decoded whole, each would cost several times its
// size at once. So the night writes its outputs' lists one element at a time, and a list
// that outgrows partSize goes to the object store in parts (each a JSON array, stored like
// any output under its content digest). The field then holds {"index": pointer}, the
// pointer to an object listing the parts' pointers: an object, so that the output stays as
// small as the pointer, and with it the checkpoint, however many parts there are. Readers
// take either form, one element at a time, and read an input straight from the object
// store. An output without parts is byte for byte what json.Marshal would write.

// partSize is the size at which a list is cut into a part: an output of a few thousand
// entries stays whole, and a part costs little to hold.
const partSize = 4 << 20

// artifactsOf opens the object store of the night's outputs.
func artifactsOf(ctx context.Context, a *runner.Attempt) (*artifacts.Store, error) {
	s, err := artifacts.Open(ctx, a.JS(), assets.ObjectArtifacts)
	if err != nil {
		return nil, runner.Temporary(err)
	}
	return s, nil
}

// doc writes a JSON object as json.Marshal writes a struct, its fields in the order given,
// a list field one element at a time, in parts once it outgrows partSize. The first error
// sticks; done returns it.
type doc struct {
	save     func(data []byte, object bool) (*kc.Output, error) // object: never inline
	partSize int

	b     []byte       // the object so far
	open  []byte       // the open list's elements since its last part, from its "["
	parts []*kc.Output // the open list's parts
	err   error
}

// newDoc writes an output of a's step, its parts stored as the step's artifacts.
func newDoc(ctx context.Context, a *runner.Attempt) *doc {
	var arts *artifacts.Store
	save := func(data []byte, object bool) (*kc.Output, error) {
		if arts == nil {
			var err error
			if arts, err = artifactsOf(ctx, a); err != nil {
				return nil, err
			}
		}
		save := arts.Save
		if object {
			save = arts.SaveObject
		}
		p, err := save(ctx, a.RunID, a.Step, data)
		if err != nil {
			return nil, runner.Temporary(err)
		}
		return p, nil
	}
	return &doc{save: save, partSize: partSize, b: []byte{'{'}}
}

func (d *doc) key(name string) {
	if len(d.b) > 1 {
		d.b = append(d.b, ',')
	}
	q, _ := json.Marshal(name)
	d.b = append(append(d.b, q...), ':')
}

func (d *doc) fail(err error) {
	if err != nil && d.err == nil {
		d.err = err
	}
}

// field writes a field whole.
func (d *doc) field(name string, v any) {
	d.key(name)
	e, err := json.Marshal(v)
	d.fail(err)
	d.b = append(d.b, e...)
}

// list opens a list field; item adds an element to it, endList closes it.
func (d *doc) list(name string) {
	d.key(name)
	d.open, d.parts = append(d.open[:0], '['), nil
}

func (d *doc) item(v any) {
	e, err := json.Marshal(v)
	d.fail(err)
	if len(d.open) > 1 {
		d.open = append(d.open, ',')
	}
	d.open = append(d.open, e...)
	if len(d.open) >= d.partSize {
		d.savePart()
	}
}

func (d *doc) savePart() {
	if d.err == nil {
		p, err := d.save(append(d.open, ']'), false)
		d.fail(err)
		d.parts = append(d.parts, p)
	}
	d.open = append(d.open[:0], '[')
}

func (d *doc) endList() {
	if d.parts == nil {
		d.b = append(append(d.b, d.open...), ']')
		return
	}
	if len(d.open) > 1 {
		d.savePart()
	}
	if d.err != nil {
		return
	}
	index, err := json.Marshal(d.parts)
	d.fail(err)
	p, err := d.save(index, true)
	d.fail(err)
	e, err := json.Marshal(partList{Index: p})
	d.fail(err)
	d.b = append(d.b, e...)
}

func (d *doc) done() (json.RawMessage, error) {
	if d.err != nil {
		return nil, fmt.Errorf("encoding output: %w", d.err)
	}
	return append(d.b, '}'), nil
}

// partList is a list field stored in parts: the pointer to the list of their pointers.
type partList struct {
	Index *kc.Output `json:"index"`
}

// output encodes v as json.Marshal does (see doc): a struct's slice fields are written one
// element at a time, in parts when large.
func output(ctx context.Context, a *runner.Attempt, v any) (json.RawMessage, error) {
	return newDoc(ctx, a).encode(v)
}

// encode writes v, when it is a struct, as its fields; anything else as json.Marshal does.
func (d *doc) encode(v any) (json.RawMessage, error) {
	rv := reflect.ValueOf(v)
	fields, ok := jsonFields(rv.Type())
	if !ok {
		b, err := json.Marshal(v)
		if err != nil {
			return nil, fmt.Errorf("encoding output: %w", err)
		}
		return b, nil
	}
	for _, f := range fields {
		fv := rv.Field(f.index)
		switch {
		case f.omitEmpty && empty(fv):
		case !isList(fv) || fv.IsNil():
			d.field(f.name, fv.Interface())
		default:
			d.list(f.name)
			for i := range fv.Len() {
				d.item(fv.Index(i).Interface())
			}
			d.endList()
		}
	}
	return d.done()
}

func isList(v reflect.Value) bool {
	return v.Kind() == reflect.Slice && v.Type().Elem().Kind() != reflect.Uint8
}

// field is a struct field as encoding/json names it.
type field struct {
	index     int
	name      string
	omitEmpty bool
}

var fieldCache sync.Map // reflect.Type → []field, or nil when the type is not handled here

// jsonFields lists the fields of a struct whose every exported field has a plain json tag;
// ok is false for anything else (json.Marshal and json.Unmarshal handle those whole).
func jsonFields(t reflect.Type) ([]field, bool) {
	if c, ok := fieldCache.Load(t); ok {
		fs, _ := c.([]field)
		return fs, fs != nil
	}
	var fs []field
	if t.Kind() == reflect.Struct {
		fs = []field{}
		for i := range t.NumField() {
			sf := t.Field(i)
			name, opts, _ := strings.Cut(sf.Tag.Get("json"), ",")
			if !sf.IsExported() {
				continue
			}
			if sf.Anonymous || name == "" || name == "-" || (opts != "" && opts != "omitempty") {
				fs = nil
				break
			}
			fs = append(fs, field{index: i, name: name, omitEmpty: opts == "omitempty"})
		}
	}
	fieldCache.Store(t, fs)
	return fs, fs != nil
}

// empty is encoding/json's omitempty rule.
func empty(v reflect.Value) bool {
	switch v.Kind() {
	case reflect.Array, reflect.Map, reflect.Slice, reflect.String:
		return v.Len() == 0
	case reflect.Bool, reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr,
		reflect.Float32, reflect.Float64, reflect.Interface, reflect.Pointer:
		return v.IsZero()
	}
	return false
}

// reader reads outputs, fetching a list's parts from the object store.
type reader struct {
	ctx  context.Context
	arts *artifacts.Store
}

func readerOf(ctx context.Context, a *runner.Attempt) (*reader, error) {
	arts, err := artifactsOf(ctx, a)
	if err != nil {
		return nil, err
	}
	return &reader{ctx: ctx, arts: arts}, nil
}

// fieldReader reads one field's value.
type fieldReader func(rd *reader, dec *json.Decoder) error

// fields maps the fields of a JSON object to their readers.
type fields map[string]fieldReader

// into reads a value whole into v.
func into(v any) fieldReader {
	return func(_ *reader, dec *json.Decoder) error { return dec.Decode(v) }
}

// each reads a list one element at a time, handing each to fn; null is an empty list.
func each[T any](fn func(T) error) fieldReader {
	return func(rd *reader, dec *json.Decoder) error {
		_, err := rd.elements(dec, func(dec *json.Decoder) error {
			var x T
			if err := dec.Decode(&x); err != nil {
				return err
			}
			return fn(x)
		})
		return err
	}
}

// input decodes an earlier step's verified output into v (see decodeFields).
func input(ctx context.Context, a *runner.Attempt, step string, v any) error {
	return readInput(ctx, a, step, func(rd *reader, r io.Reader) error { return rd.decodeFields(r, v) })
}

// readFields reads an earlier step's verified output, handing each field to its reader in
// fs; fields without one are skipped.
func readFields(ctx context.Context, a *runner.Attempt, step string, fs fields) error {
	return readInput(ctx, a, step, func(rd *reader, r io.Reader) error { return rd.object(json.NewDecoder(r), fs) })
}

// peekInput is input for a read that is not an input of the step's result (the source
// check): it stays out of the step's input fingerprint.
func peekInput(ctx context.Context, a *runner.Attempt, step string, v any) error {
	s, ok := a.Record().Steps[step]
	if !ok || s.Status != kc.Verified || s.Output == nil {
		return fmt.Errorf("step %q has no verified output in run %q", step, a.RunID)
	}
	return readOutput(ctx, a, step, s.Output, func(rd *reader, r io.Reader) error { return rd.decodeFields(r, v) })
}

// readInput streams an earlier step's verified output from the object store into read.
func readInput(ctx context.Context, a *runner.Attempt, step string, read func(*reader, io.Reader) error) error {
	out, err := a.InputRef(step)
	if err != nil {
		return err
	}
	return readOutput(ctx, a, step, out, read)
}

func readOutput(ctx context.Context, a *runner.Attempt, step string, out *kc.Output, read func(*reader, io.Reader) error) error {
	rd, err := readerOf(ctx, a)
	if err != nil {
		return err
	}
	if err := rd.arts.Read(ctx, out, func(r io.Reader) error { return read(rd, r) }); err != nil {
		return readError(step, err)
	}
	return nil
}

// readError: bytes other than their digest say stop the attempt as they are; anything else
// (the object store, a part) is worth another attempt.
func readError(step string, err error) error {
	if errors.Is(err, artifacts.ErrDigest) {
		return err
	}
	return runner.Temporary(fmt.Errorf("decoding the output of %s: %w", step, err))
}

// unmarshal decodes a step's own output (Verify's) into v, as input does.
func unmarshal(ctx context.Context, a *runner.Attempt, b []byte, v any) error {
	rd, err := readerOf(ctx, a)
	if err != nil {
		return err
	}
	if err := rd.decodeFields(bytes.NewReader(b), v); err != nil {
		return readError(a.Step, err)
	}
	return nil
}

// decodeFields decodes the JSON document r holds into v, a pointer, as json.Unmarshal does
// the documents output writes: the elements of a struct's slice fields one at a time, from
// their parts when stored so.
func (rd *reader) decodeFields(r io.Reader, v any) error {
	dec := json.NewDecoder(r)
	rv := reflect.ValueOf(v)
	if rv.Kind() != reflect.Pointer || rv.IsNil() {
		return fmt.Errorf("decoding into %T: not a pointer", v)
	}
	rv = rv.Elem()
	fs, ok := jsonFields(rv.Type())
	if !ok {
		return dec.Decode(v)
	}
	readers := fields{}
	for _, f := range fs {
		fv := rv.Field(f.index)
		readers[f.name] = into(fv.Addr().Interface())
		if isList(fv) {
			readers[f.name] = func(rd *reader, dec *json.Decoder) error { return rd.slice(dec, fv) }
		}
	}
	return rd.object(dec, readers)
}

// object reads a JSON object, handing each field's value to its reader in fs.
func (rd *reader) object(dec *json.Decoder, fs fields) error {
	if err := delim(dec, '{'); err != nil {
		return err
	}
	return rd.members(dec, fs)
}

// members reads the rest of an object whose "{" was read; a key matches a field as
// encoding/json matches them: exactly, else without regard to case.
func (rd *reader) members(dec *json.Decoder, fs fields) error {
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return err
		}
		key, _ := t.(string)
		read := fs[key]
		for name, r := range fs {
			if read == nil && strings.EqualFold(name, key) {
				read = r
			}
		}
		if read == nil {
			var skip json.RawMessage
			read = into(&skip)
		}
		if err := read(rd, dec); err != nil {
			return fmt.Errorf("field %s: %w", key, err)
		}
	}
	return delim(dec, '}')
}

// slice decodes a list (or null) into the slice fv, one element at a time.
func (rd *reader) slice(dec *json.Decoder, fv reflect.Value) error {
	s := reflect.MakeSlice(fv.Type(), 0, 0)
	null, err := rd.elements(dec, func(dec *json.Decoder) error {
		e := reflect.New(fv.Type().Elem())
		if err := dec.Decode(e.Interface()); err != nil {
			return err
		}
		s = reflect.Append(s, e.Elem())
		return nil
	})
	if err != nil {
		return err
	}
	if null {
		s = reflect.Zero(fv.Type())
	}
	fv.Set(s)
	return nil
}

// elements walks a list, an array or {"index": pointer}, calling next to decode each
// element from the decoder it is handed; null is no elements.
func (rd *reader) elements(dec *json.Decoder, next func(*json.Decoder) error) (null bool, err error) {
	t, err := dec.Token()
	switch {
	case err != nil:
		return false, err
	case t == nil:
		return true, nil
	case t == json.Delim('['):
		return false, array(dec, next)
	case t != json.Delim('{'):
		return false, fmt.Errorf("found %v, want a list", t)
	}
	var pl partList
	if err := rd.members(dec, fields{"index": into(&pl.Index)}); err != nil {
		return false, err
	}
	if rd.arts == nil || pl.Index == nil {
		return false, errors.New("a list stored in parts, without its index or an object store to read them from")
	}
	var parts []*kc.Output
	if err := rd.arts.Read(rd.ctx, pl.Index, func(r io.Reader) error { return json.NewDecoder(r).Decode(&parts) }); err != nil {
		return false, fmt.Errorf("the index of a list's parts: %w", err)
	}
	for i, p := range parts {
		if err := rd.arts.Read(rd.ctx, p, func(r io.Reader) error {
			dec := json.NewDecoder(r)
			if err := delim(dec, '['); err != nil {
				return err
			}
			return array(dec, next)
		}); err != nil {
			return false, fmt.Errorf("part %d of %d: %w", i+1, len(parts), err)
		}
	}
	return false, nil
}

// array decodes the elements of an array whose "[" was read, and its "]".
func array(dec *json.Decoder, next func(*json.Decoder) error) error {
	for dec.More() {
		if err := next(dec); err != nil {
			return err
		}
	}
	return delim(dec, ']')
}

func delim(dec *json.Decoder, want json.Delim) error {
	t, err := dec.Token()
	if err != nil {
		return err
	}
	if t != want {
		return fmt.Errorf("found %v, want %v", t, want)
	}
	return nil
}
