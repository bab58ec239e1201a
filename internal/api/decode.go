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

	"k8s.io/apimachinery/pkg/util/validation/field"
	kjson "sigs.k8s.io/json"

	"crucible.dev/crucible/internal/httperr"
)

// maxFieldPathBytes bounds a field path taken from a body: a hostile key is
// named, never echoed whole.
const maxFieldPathBytes = 100

// decode reads a JSON body strictly, as kube-apiserver's strict field
// validation does: within the size limit (413), exactly one JSON value,
// keys matched case-sensitively, and every unknown or repeated field
// refused with its path (400).
func (s *Server) decode(w http.ResponseWriter, r *http.Request, v any) error {
	if ct := r.Header.Get("Content-Type"); ct != "" {
		if mt, _, err := mime.ParseMediaType(ct); err != nil || mt != "application/json" {
			return httperr.New(http.StatusUnsupportedMediaType, "Content-Type must be application/json, not "+httperr.Truncate(ct, 100))
		}
	}
	data, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.MaxRequestBytes))
	if tooBig, ok := errors.AsType[*http.MaxBytesError](err); ok {
		return httperr.New(http.StatusRequestEntityTooLarge, fmt.Sprintf("request body over %d bytes", tooBig.Limit))
	}
	if err != nil {
		return httperr.Wrap(http.StatusBadRequest, "unreadable request body", err)
	}
	return decodeJSON(data, v)
}

// decodeJSON decodes data into v, which must be a pointer. encoding/json's
// decoder frames the one value (a syntax error's offset, trailing data);
// sigs.k8s.io/json then decodes it strictly, reporting each unknown or
// duplicate field with its path.
func decodeJSON(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	var raw json.RawMessage
	if err := dec.Decode(&raw); err != nil {
		if syntax, ok := errors.AsType[*json.SyntaxError](err); ok {
			return httperr.New(http.StatusBadRequest, fmt.Sprintf("malformed JSON at byte %d", syntax.Offset))
		}
		return httperr.Wrap(http.StatusBadRequest, "unreadable JSON body", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return httperr.New(http.StatusBadRequest, "trailing data after the JSON object")
	}
	strict, err := kjson.UnmarshalStrict(raw, v)
	if typ, ok := errors.AsType[*json.UnmarshalTypeError](err); ok {
		return typeError(typ)
	}
	if err != nil {
		return httperr.Wrap(http.StatusBadRequest, "unreadable JSON body", err)
	}
	if len(strict) > 0 {
		return badRequest(strictProblems(raw, reflect.TypeOf(v).Elem(), strict))
	}
	return nil
}

// strictProblems turns sigs.k8s.io/json's strict errors into field errors,
// in document order. Which of them are repeated keys is learned by decoding
// raw again, into a scratch t, with only that check: the errors say which
// they are in their text alone.
func strictProblems(raw []byte, t reflect.Type, strict []error) field.ErrorList {
	dups, _ := kjson.UnmarshalStrict(raw, reflect.New(t).Interface(), kjson.DisallowDuplicateFields)
	repeated := map[string]bool{}
	for _, e := range dups {
		repeated[strictPath(e)] = true
	}
	var errs field.ErrorList
	for _, e := range strict {
		path := strictPath(e)
		p := field.NewPath(httperr.Truncate(path, maxFieldPathBytes))
		if repeated[path] {
			errs = append(errs, field.Duplicate(p, field.OmitValueType{}))
		} else {
			errs = append(errs, field.Forbidden(p, "unknown field"))
		}
	}
	return errs
}

// strictPath is the JSON path of a strict error ("env[0].valueFrom").
func strictPath(err error) string {
	if fe, ok := errors.AsType[kjson.FieldError](err); ok {
		return fe.FieldPath()
	}
	return ""
}

// typeError names a value of the wrong JSON type by its path (whose list
// indexes encoding/json does not record).
func typeError(e *json.UnmarshalTypeError) error {
	detail := fmt.Sprintf("must be %s, not %s", jsonKind(e.Type), e.Value)
	if e.Field == "" {
		return httperr.New(http.StatusBadRequest, httperr.Truncate("request body: "+detail, maxMessageBytes))
	}
	p := field.NewPath(httperr.Truncate(e.Field, maxFieldPathBytes))
	return badRequest(field.ErrorList{field.TypeInvalid(p, field.OmitValueType{}, detail)})
}

// jsonKind names what JSON value decodes into t, in encoding/json's words
// for what it found ("string", "number", ...).
func jsonKind(t reflect.Type) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.String:
		return "string"
	case reflect.Bool:
		return "bool"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Float32, reflect.Float64:
		return "number"
	case reflect.Slice:
		if t.Elem().Kind() == reflect.Uint8 {
			return "string" // base64
		}
		return "array"
	case reflect.Array:
		return "array"
	case reflect.Map, reflect.Struct:
		return "object"
	default:
		return t.String()
	}
}

// badRequest is the 400 of a request with field problems: all of them in
// the message, the first one's path as the answer's field.
func badRequest(errs field.ErrorList) *httperr.Error {
	return &httperr.Error{Code: http.StatusBadRequest, Field: errs[0].Field, Msg: httperr.Truncate(errs.ToAggregate().Error(), maxMessageBytes)}
}

// maxMessageBytes bounds a public message that quotes upstream or
// validation text.
const maxMessageBytes = 1000
