/** A frame or record refused by a rule of the protocol, named by its conformance category. */
export class ProtocolError extends Error {
  /** The stable identifier of the rule broken (conformance/README.md, "Categories"). */
  readonly category: string;

  constructor(category: string, message: string) {
    super(message);
    this.name = "ProtocolError";
    this.category = category;
  }
}

/** The root of the device's own errors that are not protocol breaches. */
export class SpecSteerError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "SpecSteerError";
  }
}
