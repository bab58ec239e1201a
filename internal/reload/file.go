package reload

import (
	"fmt"
	"io"
	"os"
	"time"
)

// ReadFile reads at most limit+1 bytes of the file at path: a caller that
// gets more than limit refuses the file as too large (in its own words)
// without a huge file having been read whole.
func ReadFile(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	return data, nil
}

// FileStat is what a poll compares without reading a file. A ConfigMap
// volume's update (a symlink swap) changes it as Stat sees it.
type FileStat struct {
	size    int64
	modTime time.Time
}

// Stat is the FileStat of the file at path, following links.
func Stat(path string) (FileStat, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return FileStat{}, err
	}
	return FileStat{size: fi.Size(), modTime: fi.ModTime()}, nil
}
