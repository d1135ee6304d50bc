/**
 * A machine where user namespaces are off, for one process tree and without
 * touching the machine's sysctl: the command runs in a user namespace of its
 * own (root there, so it may set that namespace's
 * `/proc/sys/user/max_user_namespaces`, a limit per user namespace) set to
 * allow 1, then in a second one nested in it as an ordinary user (uid 1000
 * mapped to ours). That second namespace takes the one the limit allows, so
 * any further user namespace made below it (bwrap's) fails as the kernel
 * fails it where the limit is 0: ENOSPC ("Creating new namespace failed:
 * nesting depth or /proc/sys/user/max_*_namespaces exceeded"). The inner
 * user is not root there, so bwrap cannot skip the user namespace as root
 * would. Every process of the tree is an ordinary child of the test; the
 * namespaces end with them.
 */

const INNER_UID = 1000;

/** The command prefix (for AtomicOptions.wrap), or undefined where this machine lets no process make a user namespace. */
export function withoutUserNamespaces(): string[] | undefined {
  const unshare = Bun.which("unshare");
  if (!unshare) return undefined;
  const prefix = [
    unshare, "--user", "--map-root-user", "--", "sh", "-c",
    `echo 1 > /proc/sys/user/max_user_namespaces && exec ${unshare} --user --map-user=${INNER_UID} --map-group=${INNER_UID} -- "$@"`,
    "sh",
  ];
  return Bun.spawnSync([...prefix, "true"], { stdout: "ignore", stderr: "ignore" }).exitCode === 0 ? prefix : undefined;
}
