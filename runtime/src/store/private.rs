//! The store is private to its user, the way ssh keeps `~/.ssh`: a cached executable is native
//! code that the plugin loads, so an entry another user could have written must never be
//! loaded.
//!
//! - The cache root and every folder of the store below it must be owned by this user (or by
//!   root) and must not be writable by group or others. The folders above the root are not
//!   checked.
//! - So must every entry file that is read.
//! - Anything else is refused: a typed error, [`StoreError::Insecure`], names the path and the
//!   command that fixes it (`chmod 700 <dir>`). The cache is then not used for that entry, and
//!   the caller compiles instead.
//! - What the store creates is private from the start: folders are created with mode 0700 and
//!   files with 0600, temporaries included, before they are renamed into place.

use std::fs::Metadata;
use std::path::{Path, PathBuf};

use super::error::{io_err, Result, StoreError};

/// Mode of the folders the store creates.
pub const DIR_MODE: u32 = 0o700;
/// Mode of the files the store creates (temporaries and lock files included).
pub const FILE_MODE: u32 = 0o600;

/// The effective user id of this process.
#[cfg(unix)]
pub fn current_uid() -> u32 {
    rustix::process::geteuid().as_raw()
}

/// What is wrong with a folder (`is_dir`) or file of the store described by `meta`, and the
/// command that fixes it; `None` when it is private to this user.
#[cfg(unix)]
fn problem(path: &Path, meta: &Metadata, is_dir: bool) -> Option<(String, String)> {
    use std::os::unix::fs::MetadataExt;
    let me = current_uid();
    let what = if is_dir { "folder" } else { "file" };
    if meta.uid() != me && meta.uid() != 0 {
        let fix = if is_dir {
            format!("use a cache folder of your own (TORCHTPU_CACHE_DIR), or remove {}", path.display())
        } else {
            format!("rm {} (the next compile writes it again)", path.display())
        };
        return Some((format!("this {what} is owned by uid {}, not by this user (uid {me}) or root", meta.uid()), fix));
    }
    let mode = meta.mode() & 0o7777;
    if mode & 0o022 != 0 {
        let who = match (mode & 0o020 != 0, mode & 0o002 != 0) {
            (true, true) => "its group and others",
            (true, false) => "its group",
            _ => "others",
        };
        let fix =
            if is_dir { format!("chmod 700 {}", path.display()) } else { format!("chmod 600 {}", path.display()) };
        return Some((format!("this {what} is writable by {who} (mode {mode:04o})"), fix));
    }
    None
}

#[cfg(not(unix))]
fn problem(_path: &Path, _meta: &Metadata, _is_dir: bool) -> Option<(String, String)> {
    None
}

/// `Err(Insecure)` unless the folder `path` (described by `meta`) is private to this user.
pub fn check_dir(path: &Path, meta: &Metadata) -> Result<()> {
    match problem(path, meta, true) {
        None => Ok(()),
        Some((problem, fix)) => Err(StoreError::Insecure { path: path.to_path_buf(), problem, fix }),
    }
}

/// `Err(Insecure)` unless the file `path` (described by `meta`, from the open file) is
/// private to this user.
pub fn check_file(path: &Path, meta: &Metadata) -> Result<()> {
    match problem(path, meta, false) {
        None => Ok(()),
        Some((problem, fix)) => Err(StoreError::Insecure { path: path.to_path_buf(), problem, fix }),
    }
}

/// The folders from `root` down to `dir` (which is `root` or below it), root first.
fn chain(root: &Path, dir: &Path) -> Vec<PathBuf> {
    let mut out = vec![root.to_path_buf()];
    if let Ok(rest) = dir.strip_prefix(root) {
        let mut at = root.to_path_buf();
        for part in rest.components() {
            at.push(part);
            out.push(at.clone());
        }
    }
    out
}

/// Checks `root` and every folder from it down to `dir`. `Ok(false)` when one of them does
/// not exist (so nothing below it does either); `Err(Insecure)` for the first one that is
/// not private to this user.
pub fn check_dirs(root: &Path, dir: &Path) -> Result<bool> {
    for folder in chain(root, dir) {
        match std::fs::metadata(&folder) {
            Ok(meta) => check_dir(&folder, &meta)?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
            Err(e) => return Err(io_err("inspect", &folder)(e)),
        }
    }
    Ok(true)
}

/// Creates `dir` and any missing folder above it with mode 0700.
pub fn create_dir_all(dir: &Path) -> Result<()> {
    let mut builder = std::fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut builder, DIR_MODE);
    builder.create(dir).map_err(io_err("create directory", dir))
}

/// Creates `dir` (and the folders above it, down from `root`) privately where missing, then
/// checks that every folder from `root` down to it is private to this user.
pub fn ensure_dirs(root: &Path, dir: &Path) -> Result<()> {
    // Checked first: nothing is created inside a folder that is refused.
    if check_dirs(root, dir)? {
        return Ok(());
    }
    create_dir_all(dir)?;
    if check_dirs(root, dir)? {
        Ok(())
    } else {
        // Removed by another process (a `clear`) between the two calls.
        Err(io_err("create directory", dir)(std::io::ErrorKind::NotFound.into()))
    }
}

/// Open options for a new private file (mode 0600 from its creation).
pub fn new_file_options() -> std::fs::OpenOptions {
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, FILE_MODE);
    options
}

#[cfg(all(test, unix))]
mod tests {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};

    use super::*;

    fn mode(path: &Path) -> u32 {
        std::fs::metadata(path).unwrap().mode() & 0o7777
    }

    #[test]
    fn created_folders_are_0700_and_pass() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("cache");
        let dir = root.join("v2").join("executable").join("0123456789abcdef");
        assert!(!check_dirs(&root, &dir).unwrap(), "absent is not an error");
        ensure_dirs(&root, &dir).unwrap();
        for d in chain(&root, &dir) {
            assert_eq!(mode(&d), 0o700, "{}", d.display());
        }
        assert!(check_dirs(&root, &dir).unwrap());
        assert_eq!(chain(&root, &dir).len(), 4);
    }

    #[test]
    fn a_group_or_world_writable_folder_is_refused_with_the_fix() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("cache");
        let dir = root.join("v2").join("graph");
        ensure_dirs(&root, &dir).unwrap();
        for (bad, who) in
            [(0o770, "its group"), (0o707, "others"), (0o777, "its group and others"), (0o1777, "its group and others")]
        {
            std::fs::set_permissions(root.join("v2"), std::fs::Permissions::from_mode(bad)).unwrap();
            let e = check_dirs(&root, &dir).unwrap_err();
            let StoreError::Insecure { path, problem, fix } = &e else { panic!("{e}") };
            assert_eq!(path, &root.join("v2"));
            assert!(problem.contains(who), "{problem}");
            assert_eq!(fix, &format!("chmod 700 {}", root.join("v2").display()));
            let text = e.to_string();
            assert!(text.contains("refusing") && text.contains("chmod 700") && text.contains("native code"), "{text}");
        }
        // Readable by others is fine (ssh's rule is about writing).
        std::fs::set_permissions(root.join("v2"), std::fs::Permissions::from_mode(0o755)).unwrap();
        assert!(check_dirs(&root, &dir).unwrap());
        // The root is checked too.
        std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o775)).unwrap();
        assert!(matches!(check_dirs(&root, &dir), Err(StoreError::Insecure { path, .. }) if path == root));
    }

    #[test]
    fn a_writable_file_is_refused_and_new_files_are_0600() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("a.bin");
        new_file_options().open(&path).unwrap();
        assert_eq!(mode(&path), 0o600);
        check_file(&path, &std::fs::metadata(&path).unwrap()).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o666)).unwrap();
        let e = check_file(&path, &std::fs::metadata(&path).unwrap()).unwrap_err();
        assert!(e.to_string().contains(&format!("chmod 600 {}", path.display())), "{e}");
    }

    /// Only root can give a file away; as another user this checks the uid in the message.
    #[test]
    fn something_owned_by_another_user_is_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("theirs");
        create_dir_all(&dir).unwrap();
        if current_uid() != 0 {
            // Not root: only the mode checks can be exercised with files of our own, and a
            // root-owned folder (root is trusted, as by ssh) passes.
            assert!(check_dirs(Path::new("/"), Path::new("/")).unwrap());
            return;
        }
        rustix::fs::chown(&dir, Some(rustix::fs::Uid::from_raw(12345)), None).unwrap();
        assert_eq!(std::fs::metadata(&dir).unwrap().uid(), 12345);
        let e = check_dirs(&dir, &dir).unwrap_err();
        assert!(e.to_string().contains("owned by uid 12345"), "{e}");
        let file = tmp.path().join("f.bin");
        new_file_options().open(&file).unwrap();
        rustix::fs::chown(&file, Some(rustix::fs::Uid::from_raw(12345)), None).unwrap();
        let e = check_file(&file, &std::fs::metadata(&file).unwrap()).unwrap_err();
        assert!(e.to_string().contains(&format!("rm {}", file.display())), "{e}");
    }
}
