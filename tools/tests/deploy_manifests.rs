//! The Kubernetes manifests (`deploy/k8s/*.yaml`) against the image
//! (`deploy/Dockerfile`) and the image test (`deploy/test-image.sh`): no
//! container runs as root, every container runs as the image's own user
//! with `runAsNonRoot`, and a container that adds capabilities adds exactly
//! the ones the image test gives its containers (the measured needs of the
//! image's AF_XDP tools; with `--share-address`, `NET_ADMIN` as well),
//! each of them among the file capabilities the Dockerfile gives the
//! binary the container runs, with privilege escalation left allowed
//! (Kubernetes sets `no_new_privs` otherwise, under which the kernel's
//! documentation says file capabilities are not granted).
//!
//! No YAML crate is in the workspace's lock: the manifests are read with
//! the small block-style reader below (maps, lists, scalars, flow lists,
//! `|` block scalars, comments), which is all they use; it is tested on
//! its own too. Needs no privileges.

#![allow(clippy::unwrap_used)] // test harness: a failed unwrap is a failed test

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

#[derive(Debug, Clone, PartialEq)]
enum Node {
    Map(Vec<(String, Node)>),
    List(Vec<Node>),
    Scalar(String),
}

impl Node {
    fn get(&self, key: &str) -> Option<&Node> {
        match self {
            Node::Map(m) => m.iter().find(|(k, _)| k == key).map(|(_, v)| v),
            _ => None,
        }
    }

    fn path(&self, keys: &[&str]) -> Option<&Node> {
        keys.iter().try_fold(self, |n, k| n.get(k))
    }

    fn scalar(&self) -> Option<&str> {
        match self {
            Node::Scalar(s) => Some(s),
            _ => None,
        }
    }

    fn list(&self) -> &[Node] {
        match self {
            Node::List(l) => l,
            _ => &[],
        }
    }
}

/// One significant line: its indentation and its text, comments removed.
#[derive(Debug, Clone)]
struct Line {
    indent: usize,
    text: String,
}

/// The documents of a block-style YAML file.
fn parse_yaml(src: &str) -> Vec<Node> {
    let mut docs = Vec::new();
    for doc in src.split("\n---") {
        let lines = lines(doc);
        if lines.is_empty() {
            continue;
        }
        let mut i = 0;
        let indent = lines[0].indent;
        docs.push(block(&lines, &mut i, indent));
        assert_eq!(i, lines.len(), "unparsed from {:?}", lines.get(i));
    }
    docs
}

fn lines(doc: &str) -> Vec<Line> {
    let mut out = Vec::new();
    let mut raw = doc.lines().peekable();
    while let Some(l) = raw.next() {
        let text = strip_comment(l);
        if text.trim().is_empty() {
            continue;
        }
        let indent = text.len() - text.trim_start().len();
        let text = text.trim().to_owned();
        let block_scalar = text.ends_with(": |") || text.ends_with(": >") || text.ends_with(": |-");
        out.push(Line { indent, text });
        if block_scalar {
            // The block's lines are the scalar (not parsed, comments kept).
            let mut body = Vec::new();
            while let Some(next) = raw.peek() {
                let ni = next.len() - next.trim_start().len();
                if !next.trim().is_empty() && ni <= indent {
                    break;
                }
                body.push(next.trim().to_owned());
                raw.next();
            }
            if let Some(last) = out.last_mut() {
                let key = last.text.rsplit_once(": ").map(|(k, _)| k.to_owned());
                last.text = format!("{}: {}", key.unwrap_or_default(), body.join(" "));
            }
        }
    }
    out
}

/// `l` without a comment: `#` at the start or after a space, outside quotes.
fn strip_comment(l: &str) -> &str {
    let (mut single, mut double) = (false, false);
    let mut prev = ' ';
    for (i, c) in l.char_indices() {
        match c {
            '\'' if !double => single = !single,
            '"' if !single => double = !double,
            '#' if !single && !double && prev.is_whitespace() => return &l[..i],
            _ => {}
        }
        prev = c;
    }
    l
}

fn block(lines: &[Line], i: &mut usize, indent: usize) -> Node {
    if lines[*i].text.starts_with('-') {
        list(lines, i, indent)
    } else {
        map(lines, i, indent)
    }
}

fn list(lines: &[Line], i: &mut usize, indent: usize) -> Node {
    let mut items = Vec::new();
    while *i < lines.len() && lines[*i].indent == indent && lines[*i].text.starts_with('-') {
        let rest = lines[*i].text[1..].trim_start().to_owned();
        if rest.is_empty() {
            *i += 1;
            let inner = lines[*i].indent;
            items.push(block(lines, i, inner));
        } else if key_value(&rest).is_some() {
            // `- key: value` opens a map whose keys sit where `key` does.
            let col = indent + (lines[*i].text.len() - rest.len());
            let mut local = lines.to_vec();
            local[*i] = Line {
                indent: col,
                text: rest,
            };
            items.push(map(&local, i, col));
        } else {
            items.push(scalar(&rest));
            *i += 1;
        }
    }
    Node::List(items)
}

fn map(lines: &[Line], i: &mut usize, indent: usize) -> Node {
    let mut entries = Vec::new();
    while *i < lines.len() && lines[*i].indent == indent && !lines[*i].text.starts_with('-') {
        let (k, v) = key_value(&lines[*i].text)
            .unwrap_or_else(|| panic!("not `key: value`: {:?}", lines[*i]));
        *i += 1;
        let value = if !v.is_empty() {
            scalar(v)
        } else if *i < lines.len()
            && (lines[*i].indent > indent
                || (lines[*i].indent == indent && lines[*i].text.starts_with('-')))
        {
            let inner = lines[*i].indent;
            block(lines, i, inner)
        } else {
            Node::Scalar(String::new())
        };
        entries.push((k.to_owned(), value));
    }
    Node::Map(entries)
}

/// `key: value` or `key:` (outside quotes and flow lists).
fn key_value(text: &str) -> Option<(&str, &str)> {
    if text.starts_with('[') || text.starts_with('"') || text.starts_with('\'') {
        return None;
    }
    if let Some(k) = text.strip_suffix(':') {
        return Some((k.trim(), ""));
    }
    text.split_once(": ").map(|(k, v)| (k.trim(), v.trim()))
}

fn scalar(v: &str) -> Node {
    let v = v.trim();
    if let Some(inner) = v.strip_prefix('[').and_then(|r| r.strip_suffix(']')) {
        return Node::List(
            inner
                .split(',')
                .filter(|s| !s.trim().is_empty())
                .map(scalar)
                .collect(),
        );
    }
    let unquoted = v
        .strip_prefix('"')
        .and_then(|r| r.strip_suffix('"'))
        .or_else(|| v.strip_prefix('\'').and_then(|r| r.strip_suffix('\'')))
        .unwrap_or(v);
    Node::Scalar(unquoted.to_owned())
}

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn read(rel: &str) -> String {
    std::fs::read_to_string(repo().join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

/// The image's user id (`useradd … --uid N` in the Dockerfile) and its
/// default user (`USER`).
fn image_user(dockerfile: &str) -> (String, String) {
    let uid = dockerfile
        .split_whitespace()
        .skip_while(|w| *w != "--uid")
        .nth(1)
        .expect("useradd --uid in the Dockerfile")
        .to_owned();
    let user = dockerfile
        .lines()
        .find_map(|l| l.strip_prefix("USER "))
        .expect("USER in the Dockerfile")
        .trim()
        .to_owned();
    (uid, user)
}

/// The binaries the Dockerfile gives file capabilities, and those
/// capabilities (upper case, without `CAP_`).
fn file_caps(dockerfile: &str) -> (BTreeSet<String>, BTreeSet<String>) {
    let bins = dockerfile
        .lines()
        .find_map(|l| {
            let l = l.trim();
            l.strip_prefix("RUN for b in ")
                .and_then(|r| r.split_once("; do"))
                .map(|(bins, _)| bins.split_whitespace().map(str::to_owned).collect())
        })
        .expect("the Dockerfile's setcap loop");
    let caps = dockerfile
        .lines()
        .find_map(|l| {
            let l = l.trim();
            l.strip_prefix("/tmp/setcap ")
                .and_then(|r| r.split_whitespace().next())
                .and_then(|c| c.strip_suffix("+p"))
                .map(|c| {
                    c.split(',')
                        .map(|c| c.trim_start_matches("cap_").to_uppercase())
                        .collect()
                })
        })
        .expect("the Dockerfile's setcap line (permitted only, +p)");
    (bins, caps)
}

/// The capabilities `deploy/test-image.sh` gives its containers.
fn image_test_caps(script: &str) -> BTreeSet<String> {
    let line = script
        .lines()
        .find(|l| l.starts_with("caps=("))
        .expect("caps=(...) in test-image.sh");
    line.split_whitespace()
        .collect::<Vec<_>>()
        .windows(2)
        .filter(|w| w[0].trim_start_matches("caps=(") == "--cap-add")
        .map(|w| w[1].trim_end_matches(')').to_owned())
        .collect()
}

/// Every container of a Pod, Deployment, StatefulSet, DaemonSet or Job,
/// with its pod's securityContext.
fn containers(doc: &Node) -> Vec<(Option<&Node>, &Node)> {
    let spec = match doc.path(&["spec", "template", "spec"]) {
        Some(s) => s,
        None => match doc.get("spec") {
            Some(s) => s,
            None => return Vec::new(),
        },
    };
    let pod_sc = spec.get("securityContext");
    ["initContainers", "containers"]
        .iter()
        .filter_map(|k| spec.get(k))
        .flat_map(Node::list)
        .map(|c| (pod_sc, c))
        .collect()
}

#[test]
fn containers_run_as_the_images_user_with_the_capabilities_its_tools_need() {
    let dockerfile = read("deploy/Dockerfile");
    let (uid, user) = image_user(&dockerfile);
    assert_ne!(uid, "0");
    assert_ne!(user, "root");
    let (bins, caps) = file_caps(&dockerfile);
    let needed = image_test_caps(&read("deploy/test-image.sh"));
    assert_eq!(
        needed,
        ["IPC_LOCK", "NET_RAW", "SYS_ADMIN"]
            .map(str::to_owned)
            .into(),
        "the measured needs (deploy/README.md, \"Capabilities\")"
    );
    assert!(needed.is_subset(&caps), "{needed:?} not all in {caps:?}");

    let mut dir: Vec<_> = std::fs::read_dir(repo().join("deploy/k8s"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml" || e == "yml"))
        .collect();
    dir.sort();
    let mut seen = 0;
    for file in &dir {
        let text = std::fs::read_to_string(file).unwrap();
        for doc in parse_yaml(&text) {
            for (pod_sc, c) in containers(&doc) {
                seen += 1;
                let name = c.get("name").and_then(Node::scalar).unwrap_or("?");
                let at = format!("{}: container {name}", file.display());
                let sc = c.get("securityContext");
                let field = |k: &str| {
                    sc.and_then(|s| s.get(k))
                        .or_else(|| pod_sc.and_then(|s| s.get(k)))
                        .and_then(Node::scalar)
                };
                assert_eq!(field("runAsUser"), Some(uid.as_str()), "{at}: runAsUser");
                assert_eq!(field("runAsNonRoot"), Some("true"), "{at}: runAsNonRoot");
                assert_ne!(field("privileged"), Some("true"), "{at}: privileged");
                let capabilities = sc.and_then(|s| s.get("capabilities"));
                let drop: Vec<_> = capabilities
                    .and_then(|c| c.get("drop"))
                    .map(Node::list)
                    .unwrap_or(&[])
                    .iter()
                    .filter_map(Node::scalar)
                    .collect();
                assert_eq!(drop, ["ALL"], "{at}: capabilities.drop");
                let add: BTreeSet<String> = capabilities
                    .and_then(|c| c.get("add"))
                    .map(Node::list)
                    .unwrap_or(&[])
                    .iter()
                    .filter_map(Node::scalar)
                    .map(str::to_owned)
                    .collect();
                if add.is_empty() {
                    continue;
                }
                // --share-address also needs NET_ADMIN (its neighbour
                // requests; deploy/README.md, "Capabilities").
                let shares = c
                    .get("args")
                    .map(Node::list)
                    .unwrap_or(&[])
                    .iter()
                    .any(|a| a.scalar() == Some("--share-address"));
                let mut want = needed.clone();
                if shares {
                    want.insert("NET_ADMIN".to_owned());
                }
                assert_eq!(add, want, "{at}: capabilities.add");
                // File capabilities are the only way a non-root process gets
                // them here: on the binary, and not cancelled by no_new_privs.
                let command = c
                    .get("command")
                    .map(Node::list)
                    .and_then(|l| l.first())
                    .and_then(Node::scalar)
                    .unwrap_or_else(|| panic!("{at}: adds capabilities but names no command"));
                assert!(
                    bins.contains(command),
                    "{at}: {command} has no file capabilities in the image ({bins:?})"
                );
                assert_ne!(
                    field("allowPrivilegeEscalation"),
                    Some("false"),
                    "{at}: no_new_privs (allowPrivilegeEscalation: false) may keep \
                     {command}'s file capabilities out"
                );
            }
        }
    }
    assert!(seen > 0, "no container found under deploy/k8s");
}

#[test]
fn the_reader_takes_what_the_manifests_use() {
    let src = r##"# a comment
apiVersion: v1
kind: Pod
metadata:
  annotations:
    k8s.v1.cni.cncf.io/networks: net@net1  # trailing comment
spec:
  containers:
    - name: server
      command: ["iwarp-perf"]
      args:
        - write_bw
        - "1"
      securityContext:
        runAsUser: 10001
        capabilities:
          drop: ["ALL"]
          add:
            - SYS_ADMIN  # why
            # - BPF
            - NET_RAW
  volumes:
  - name: hugepages
    emptyDir:
      medium: HugePages-2Mi
---
kind: Other
spec:
  config: |
    { "type": "macvlan", "x": "#not a comment" }
"##;
    let docs = parse_yaml(src);
    assert_eq!(docs.len(), 2);
    let d = &docs[0];
    assert_eq!(d.get("kind").and_then(Node::scalar), Some("Pod"));
    assert_eq!(
        d.path(&["metadata", "annotations", "k8s.v1.cni.cncf.io/networks"])
            .and_then(Node::scalar),
        Some("net@net1")
    );
    let cs = containers(d);
    assert_eq!(cs.len(), 1);
    let c = cs[0].1;
    assert_eq!(
        c.get("command"),
        Some(&Node::List(vec![Node::Scalar("iwarp-perf".into())]))
    );
    assert_eq!(
        c.get("args"),
        Some(&Node::List(vec![
            Node::Scalar("write_bw".into()),
            Node::Scalar("1".into())
        ]))
    );
    assert_eq!(
        c.path(&["securityContext", "capabilities", "add"]),
        Some(&Node::List(vec![
            Node::Scalar("SYS_ADMIN".into()),
            Node::Scalar("NET_RAW".into())
        ]))
    );
    assert_eq!(
        d.path(&["spec", "volumes"]).map(|v| v.list().len()),
        Some(1)
    );
    assert_eq!(
        docs[1].path(&["spec", "config"]).and_then(Node::scalar),
        Some(r##"{ "type": "macvlan", "x": "#not a comment" }"##)
    );
    assert!(containers(&docs[1]).is_empty());
}
