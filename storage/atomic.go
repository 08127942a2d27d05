/*
Copyright 2026 The csi-lib fork authors.

Licensed under the Apache License, Version 2.0 (the "License");
you may not use this file except in compliance with the License.
You may obtain a copy of the License at

    http://www.apache.org/licenses/LICENSE-2.0

Unless required by applicable law or agreed to in writing, software
distributed under the License is distributed on an "AS IS" BASIS,
WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
See the License for the specific language governing permissions and
limitations under the License.
*/

package storage

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// writeFileAtomic replaces dir/name with data so that a reader, or the file after a crash, holds
// either the old or the new content in full.
func writeFileAtomic(dir, name string, data []byte, perm os.FileMode) error {
	path := filepath.Join(dir, name)
	// Step 1: a temporary file in the same directory, so the rename stays on one filesystem.
	tmp, err := os.CreateTemp(dir, "."+name+".tmp-*")
	if err == nil {
		// Step 2: the content is on stable storage before the name points at it.
		if err = writeAndSync(tmp, data, perm); err == nil {
			// Step 3: swap the name.
			err = os.Rename(tmp.Name(), path)
		}
		if err != nil {
			_ = os.Remove(tmp.Name())
		}
	}
	if err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	// Step 4: persist the rename itself.
	return syncDir(dir)
}

// writeAndSync writes data to the new file f, gives it mode perm, syncs and closes it.
func writeAndSync(f *os.File, data []byte, perm os.FileMode) error {
	_, err := f.Write(data)
	if err == nil {
		err = f.Chmod(perm)
	}
	if err == nil {
		err = f.Sync()
	}
	if closeErr := f.Close(); err == nil {
		err = closeErr
	}
	return err
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

const (
	// dataLinkName is the symlink that points at the current generation of files. Applications
	// may watch it for changes.
	dataLinkName = "..data"
	// generationPrefix starts the name of every timestamped generation directory.
	generationPrefix = ".."
)

// projectFiles makes files the complete content of dir, kubelet-style, so that a reader going
// through dir never sees a key of one issuance beside a chain of another. Names are cleaned
// relative paths (cleanFilePath); a sub-path's first element is the visible name.
//  1. write every file (mode 0440, group gid if set) into a new hidden directory
//     "..<timestamp>.<random>" inside dir (sub-directories 0755) and fsync it;
//  2. point a temporary symlink at that directory and rename it over "..data" (one atomic
//     rename(2) switches every file at once);
//  3. make each visible name a symlink "name -> ..data/name" (created once, then left alone;
//     a regular file of an older layout at that name is replaced);
//  4. remove visible names that are no longer in the set, and older generations.
//
// Temporary names are short and fixed in length, so every name that passed validation fits.
// Callers serialise calls for one directory. A crash before step 2 leaves an unused generation
// that the next call (or the start-up sweep) removes; after it, the new set is in place.
//
// hook is nil except in tests, which interrupt the write at the points it is called with (see
// projectPoint). The clean-up of a failed write is not deferred, so a hook that panics leaves
// the directory as a crash at that point would.
func projectFiles(dir string, files map[string][]byte, gid *int64, hook func(projectPoint)) error {
	at := func(p projectPoint) {
		if hook != nil {
			hook(p)
		}
	}
	// Step 1.
	genDir, err := os.MkdirTemp(dir, generationPrefix+time.Now().UTC().Format("2006_01_02_15_04_05.")+"*")
	if err != nil {
		return fmt.Errorf("creating generation directory: %w", err)
	}
	gen := filepath.Base(genDir)
	fail := func(err error) error {
		_ = os.RemoveAll(genDir)
		return err
	}
	visible := make(map[string]bool, len(files))
	for name, content := range files {
		first, _, _ := strings.Cut(name, "/")
		visible[first] = true
		// A sub-path's directories; for a top-level name this is genDir itself, which exists.
		path := filepath.Join(genDir, name)
		if err := os.MkdirAll(filepath.Dir(path), generationMode); err != nil {
			return fail(err)
		}
		file, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if err == nil {
			err = writeAndSync(file, content, projectFileMode)
		}
		if err == nil {
			err = chgrp(path, gid)
		}
		if err != nil {
			return fail(err)
		}
		at(pointFileWritten)
	}
	if err := os.Chmod(genDir, generationMode); err != nil {
		return fail(err)
	}
	// The generation directory is grouped too, so that fsGroup reaches every file a pod reads.
	if err := chgrp(genDir, gid); err != nil {
		return fail(err)
	}
	if err := chgrp(dir, gid); err != nil {
		return fail(err)
	}
	if err := syncDir(genDir); err != nil {
		return fail(err)
	}
	at(pointGenerationReady)
	// Step 2.
	if err := replaceSymlink(dir, dataLinkName, gen); err != nil {
		return fail(err)
	}
	at(pointDataSwapped)
	// Step 3.
	for name := range visible {
		target := filepath.Join(dataLinkName, name)
		if cur, err := os.Readlink(filepath.Join(dir, name)); err == nil && cur == target {
			continue
		}
		if err := replaceSymlink(dir, name, target); err != nil {
			return err
		}
	}
	if err := syncDir(dir); err != nil {
		return err
	}
	// Step 4.
	_, err = removeStale(dir, gen, visible)
	return err
}

// projectPoint names a point of projectFiles at which a test may interrupt it.
type projectPoint int

const (
	// pointFileWritten: one more file of the new generation is written (once per file).
	pointFileWritten projectPoint = iota
	// pointGenerationReady: step 1 is done, "..data" still names the previous generation.
	pointGenerationReady
	// pointDataSwapped: step 2 is done, "..data" names the new generation; steps 3 and 4 remain.
	pointDataSwapped
)

// removeStale removes from a data directory every generation but gen, leftover temporary
// links, and visible names not in keep (nil keeps every visible name). It returns the names it
// removed.
func removeStale(dir, gen string, keep map[string]bool) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var removed []string
	for _, e := range entries {
		name := e.Name()
		if name != dataLinkName && name != gen && (strings.HasPrefix(name, generationPrefix) || keep != nil && !keep[name]) {
			if err := os.RemoveAll(filepath.Join(dir, name)); err != nil {
				return removed, err
			}
			removed = append(removed, name)
		}
	}
	return removed, nil
}

func chgrp(path string, gid *int64) error {
	if gid == nil {
		return nil
	}
	if err := os.Lchown(path, -1, int(*gid)); err != nil {
		return fmt.Errorf("setting group %d on %s: %w", *gid, path, err)
	}
	return nil
}

// replaceSymlink atomically makes dir/name a symlink to target, replacing whatever was there
// (including a regular file written by an older layout). The temporary link has a short random
// name, so a name of any valid length works.
func replaceSymlink(dir, name, target string) error {
	tmp := filepath.Join(dir, fmt.Sprintf("%stmp-%08x", generationPrefix, rand.Uint32()))
	if err := os.Symlink(target, tmp); err != nil {
		return fmt.Errorf("creating symlink for %s: %w", name, err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, name)); err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("publishing symlink for %s: %w", name, err)
	}
	return nil
}
