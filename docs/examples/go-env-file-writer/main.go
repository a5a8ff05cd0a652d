// Command go-env-file-writer is a minimal, standard-library-only writer of gpu-env-hook env files, for
// device plugins written in Go. It follows docs/env-file.md, "The format, as a specification":
//
//	go run main.go -dir /run/nvidia-env [-key FILE] (-pod-uid UID | -pod-namespace NS -pod-name NAME)
//	    [-container NAME] DEVICE_ID... -- KEY=VALUE...
//	go run main.go -dir /run/nvidia-env [-key FILE] -allocate DEVICE_ID...
//
// Flags may also come after (or between) the device ids. Keys the hook refuses are refused here too.
//
// It prints the file's path (the same for any order of the device ids: HMAC-SHA256 under the node's naming
// key, which gpu-env-hook creates on first use at /var/lib/gpu-env-hook/alloc.key), then writes the file
// atomically: a temporary file in the same directory, mode 0600, fsync, rename over the final name, fsync of
// the directory. Run it as root: the hook accepts only root-owned files, and the key is root's. With
// -allocate it writes nothing and prints, as JSON, what Allocate returns for the device ids (AllocateAnswer).
package main

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
)

// GuardDevice is the CDI device that keeps a container from running until its env file was applied (the NRI
// plugin or the runtime shim removes its mount; gpu-env-hook install writes its spec): docs/nri.md.
const GuardDevice = "gpu-env-hook.io/env-file=required"

// AllocateAnswer returns what Allocate answers for a container given deviceIDs: the variable naming its env
// file, and the guard's CDI device. In a device plugin (k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1):
//
//	resp := &pluginapi.ContainerAllocateResponse{Envs: envs}
//	for _, name := range cdiDevices {
//		resp.CDIDevices = append(resp.CDIDevices, &pluginapi.CDIDevice{Name: name})
//	}
func AllocateAnswer(key []byte, dir string, deviceIDs []string) (envs map[string]string, cdiDevices []string, err error) {
	name, err := EnvFileName(key, deviceIDs)
	if err != nil {
		return nil, nil, err
	}
	return map[string]string{"NVIDIA_ENV_FROM_FILE": filepath.Join(dir, name)}, []string{GuardDevice}, nil
}

// keyPattern is the only key shape the hook accepts.
var keyPattern = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// refusedKey tells whether the hook refuses a key from an env file (docs/env-file.md, "Refused keys"): they
// would load or run code in the container's processes or steer the hook and NVIDIA's tools.
func refusedKey(key string) bool {
	for _, prefix := range []string{"LD_", "PYTHON", "NVIDIA_CTK_", "GPU_ENV_HOOK_"} {
		if strings.HasPrefix(key, prefix) {
			return true
		}
	}
	return key == "PATH" || key == "NVIDIA_ENV_FROM_FILE"
}

// ReadKey reads the node's naming key: a regular file of exactly 32 bytes that only its owner may read.
// It never creates one (gpu-env-hook does, atomically, on first use): a key made here could differ from
// the one the node's other producers use.
func ReadKey(path string) ([]byte, error) {
	info, err := os.Lstat(path)
	if err != nil {
		return nil, err
	}
	if !info.Mode().IsRegular() || info.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("naming key %s: must be a regular file of mode 0600", path)
	}
	key, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	if len(key) != 32 {
		return nil, fmt.Errorf("naming key %s: holds %d bytes, not a 32-byte key", path, len(key))
	}
	return key, nil
}

// EnvFileName returns "<32 hex digits>.env" for a set of device ids: HMAC-SHA256 under the node's key of
// the sorted, distinct ids joined by "\n", first 32 hex digits (128 bits).
func EnvFileName(key []byte, deviceIDs []string) (string, error) {
	seen := map[string]bool{}
	var ids []string
	for _, id := range deviceIDs {
		if id == "" || strings.ContainsAny(id, "\n\x00") {
			return "", fmt.Errorf("device id %q: must be non-empty, without newline or NUL", id)
		}
		if !seen[id] {
			seen[id] = true
			ids = append(ids, id)
		}
	}
	if len(ids) == 0 {
		return "", errors.New("no device id")
	}
	sort.Strings(ids) // byte order, as Python's sorted() on str for these ids
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(strings.Join(ids, "\n")))
	return hex.EncodeToString(mac.Sum(nil))[:32] + ".env", nil
}

// Quote renders a value in double quotes with the escapes the hook's reader decodes.
func Quote(value string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range value {
		switch r {
		case '\\':
			b.WriteString(`\\`)
		case '"':
			b.WriteString(`\"`)
		case '\n':
			b.WriteString(`\n`)
		case '\r':
			b.WriteString(`\r`)
		case '\t':
			b.WriteString(`\t`)
		case '\v':
			b.WriteString(`\v`)
		case '\f':
			b.WriteString(`\f`)
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}

// Render returns the file's text: the pin keys first (the pod's UID, or its namespace and name as
// kubelet's pod-resources List() reports them), then the variables in the order given.
func Render(podUID, podNamespace, podName, container string, keys []string, values map[string]string) (string, error) {
	var b strings.Builder
	b.WriteString("# Written by go-env-file-writer; read by the gpu-env-hook prestart hook.\n")
	if podUID != "" {
		b.WriteString("GPU_ENV_HOOK_POD_UID=" + Quote(podUID) + "\n")
	}
	if (podNamespace == "") != (podName == "") {
		return "", errors.New("a pod namespace pin needs a pod name pin, and the reverse")
	}
	if podNamespace != "" {
		b.WriteString("GPU_ENV_HOOK_POD_NAMESPACE=" + Quote(podNamespace) + "\n")
		b.WriteString("GPU_ENV_HOOK_POD_NAME=" + Quote(podName) + "\n")
	}
	if container != "" {
		if podUID == "" && podNamespace == "" {
			return "", errors.New("a container pin needs a pod pin")
		}
		b.WriteString("GPU_ENV_HOOK_CONTAINER_NAME=" + Quote(container) + "\n")
	}
	for _, key := range keys {
		value := values[key]
		if !keyPattern.MatchString(key) || refusedKey(key) {
			return "", fmt.Errorf("key %q is not accepted", key)
		}
		if strings.ContainsRune(value, 0) || !isUTF8(value) {
			return "", fmt.Errorf("value of %s: NUL or invalid UTF-8", key)
		}
		b.WriteString(key + "=" + Quote(value) + "\n")
	}
	if b.Len() > 65536 {
		return "", errors.New("larger than the default max-bytes (65536)")
	}
	return b.String(), nil
}

func isUTF8(s string) bool {
	return strings.ToValidUTF8(s, "\uFFFD") == s
}

// WriteAtomically writes text at path: temp file in the same directory, 0600, fsync, rename, fsync dir.
func WriteAtomically(path, text string) (err error) {
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			os.Remove(tmp.Name())
		}
	}()
	if err = tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return err
	}
	if _, err = tmp.WriteString(text); err != nil {
		tmp.Close()
		return err
	}
	if err = tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err = tmp.Close(); err != nil {
		return err
	}
	if err = os.Rename(tmp.Name(), path); err != nil {
		return err
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

func main() {
	dir := flag.String("dir", "/run/nvidia-env", "the node's [env-file] directory")
	keyPath := flag.String("key", "/var/lib/gpu-env-hook/alloc.key", "the node's naming key")
	podUID := flag.String("pod-uid", "", "pin the file to this pod UID")
	podNamespace := flag.String("pod-namespace", "", "pin the file to the pod of this namespace...")
	podName := flag.String("pod-name", "", "...and this name")
	container := flag.String("container", "", "pin the file to this container name too")
	allocate := flag.Bool("allocate", false, "print Allocate's answer (envs, CDI devices) as JSON; write nothing")
	var ids, assignments []string
	head := os.Args[1:]
	for i, arg := range head {
		if arg == "--" {
			head, assignments = head[:i], head[i+1:]
			break
		}
	}
	// The flag package stops at the first device id: parse again after each one, so that flags may follow.
	for flag.CommandLine.Parse(head) == nil && flag.NArg() > 0 {
		ids = append(ids, flag.Arg(0))
		head = flag.Args()[1:]
	}
	keys := []string{}
	values := map[string]string{}
	for _, assignment := range assignments {
		key, value, ok := strings.Cut(assignment, "=")
		if !ok {
			fail(fmt.Errorf("%q is not KEY=VALUE", assignment))
		}
		if _, dup := values[key]; dup {
			fail(fmt.Errorf("%s is given twice", key))
		}
		keys = append(keys, key)
		values[key] = value
	}
	key, err := ReadKey(*keyPath)
	if err != nil {
		fail(err)
	}
	if *allocate {
		envs, cdiDevices, err := AllocateAnswer(key, *dir, ids)
		if err != nil {
			fail(err)
		}
		answer, _ := json.Marshal(map[string]any{"envs": envs, "cdiDevices": cdiDevices})
		fmt.Println(string(answer))
		return
	}
	name, err := EnvFileName(key, ids)
	if err != nil {
		fail(err)
	}
	text, err := Render(*podUID, *podNamespace, *podName, *container, keys, values)
	if err != nil {
		fail(err)
	}
	path := filepath.Join(*dir, name)
	if err := WriteAtomically(path, text); err != nil {
		fail(err)
	}
	fmt.Println(path)
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "go-env-file-writer:", err)
	os.Exit(1)
}
