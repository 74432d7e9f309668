/** The two calls the log's writer lock uses of fs-native-extensions (which ships no types). */
declare module "fs-native-extensions" {
  /** An exclusive lock on the whole of `fd`'s file, without waiting: false when another open file
   * description holds one (Linux: an open-file-description lock, fcntl F_OFD_SETLK; Apple: flock). */
  export function tryLock(fd: number): boolean;
  /** Release the lock `fd` holds. */
  export function unlock(fd: number): void;
}
