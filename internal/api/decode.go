package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"reflect"
	"strings"

	"crucible.dev/crucible/internal/httperr"
)

// decode reads a JSON body strictly: a size limit (413), unknown fields and
// trailing data are errors naming what was wrong. The body is read whole
// (it is bounded) so that an unknown field can be named by walking it
// against v's type: encoding/json reports unknown fields only as text.
func (s *Server) decode(w http.ResponseWriter, r *http.Request, v any) error {
	if ct := r.Header.Get("Content-Type"); ct != "" {
		if mt, _, err := mime.ParseMediaType(ct); err != nil || mt != "application/json" {
			return httperr.New(http.StatusUnsupportedMediaType, "Content-Type must be application/json, not "+truncate(ct, 100))
		}
	}
	data, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.MaxRequestBytes))
	if tooBig, ok := errors.AsType[*http.MaxBytesError](err); ok {
		return httperr.New(http.StatusRequestEntityTooLarge, fmt.Sprintf("request body over %d bytes", tooBig.Limit))
	}
	if err != nil {
		return httperr.Wrap(http.StatusBadRequest, "unreadable request body", err)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return decodeError(data, v, err)
	}
	if dec.More() {
		return httperr.New(http.StatusBadRequest, "trailing data after the JSON object")
	}
	return nil
}

// decodeError says what was wrong with a body that did not decode into v.
func decodeError(data []byte, v any, err error) error {
	if syntax, ok := errors.AsType[*json.SyntaxError](err); ok {
		return httperr.New(http.StatusBadRequest, fmt.Sprintf("malformed JSON at byte %d", syntax.Offset))
	}
	if typ, ok := errors.AsType[*json.UnmarshalTypeError](err); ok {
		return &httperr.Error{Code: http.StatusBadRequest, Field: typ.Field,
			Msg: fmt.Sprintf("%s: must be %s, not %s", typ.Field, typ.Type, typ.Value)}
	}
	if name, ok := unknownField(data, reflect.TypeOf(v)); ok {
		return &httperr.Error{Code: http.StatusBadRequest, Field: name, Msg: "unknown field " + name, Err: err}
	}
	return httperr.Wrap(http.StatusBadRequest, "unreadable JSON body", err)
}

// maxFieldNameBytes bounds an unknown field's name in a message.
const maxFieldNameBytes = 100

// unknownField returns the first object key of data, in document order,
// that matches no field of t where t is a struct, as encoding/json matches
// them (the json tag's name or the Go name, case-insensitively, embedded
// structs' fields promoted). data is JSON that already tokenizes.
func unknownField(data []byte, t reflect.Type) (string, bool) {
	dec := json.NewDecoder(bytes.NewReader(data))
	name, found, err := walk(dec, t)
	if err != nil || !found {
		return "", false
	}
	return truncate(name, maxFieldNameBytes), true
}

// walk consumes one JSON value from dec, judged against t; it returns the
// first unknown key it meets, if any.
func walk(dec *json.Decoder, t reflect.Type) (name string, found bool, err error) {
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	tok, err := dec.Token()
	if err != nil {
		return "", false, err
	}
	d, ok := tok.(json.Delim)
	if !ok {
		return "", false, nil // a scalar
	}
	var elem func(key string) (reflect.Type, bool)
	switch {
	case d == '{' && t != nil && t.Kind() == reflect.Struct:
		elem = func(key string) (reflect.Type, bool) { return fieldType(t, key) }
	case d == '{' && t != nil && t.Kind() == reflect.Map:
		elem = func(string) (reflect.Type, bool) { return t.Elem(), true }
	case d == '{':
		elem = func(string) (reflect.Type, bool) { return nil, true } // any, RawMessage: nothing is unknown
	}
	for dec.More() {
		var next reflect.Type
		if elem != nil {
			key, err := dec.Token()
			if err != nil {
				return "", false, err
			}
			k, _ := key.(string)
			ft, known := elem(k)
			if !known {
				return k, true, nil
			}
			next = ft
		} else if t != nil && (t.Kind() == reflect.Slice || t.Kind() == reflect.Array) {
			next = t.Elem()
		}
		if name, found, err := walk(dec, next); err != nil || found {
			return name, found, err
		}
	}
	_, err = dec.Token() // the closing delimiter
	return "", false, err
}

// fieldType finds the field of struct t that a JSON key decodes into.
func fieldType(t reflect.Type, key string) (reflect.Type, bool) {
	var fold reflect.Type
	for i := range t.NumField() {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, _, _ := strings.Cut(tag, ",")
		if f.Anonymous && name == "" {
			ft := f.Type
			if ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct {
				if et, ok := fieldType(ft, key); ok {
					return et, true
				}
				continue
			}
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		if name == key {
			return f.Type, true
		}
		if fold == nil && strings.EqualFold(name, key) {
			fold = f.Type
		}
	}
	return fold, fold != nil
}
