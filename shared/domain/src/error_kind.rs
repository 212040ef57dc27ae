//! Name validation failures as service errors: always `INVALID_ARGUMENT`, with the
//! validation's message (which names the field, never quotes a secret).

use flotilla_error::Error;

use crate::names::NameError;

impl From<NameError> for Error {
    fn from(e: NameError) -> Self {
        Error::invalid(e.0)
    }
}

#[cfg(test)]
mod tests {
    use flotilla_error::ErrorKind;

    use super::*;
    use crate::names::validate_segment;

    #[test]
    fn a_name_error_is_invalid_argument_with_its_message() {
        let e = validate_segment("catalog name", "").unwrap_err();
        let message = e.0.clone();
        let mapped = Error::from(e);
        assert_eq!(mapped.kind, ErrorKind::InvalidArgument);
        assert_eq!(mapped.message, message);
        assert_eq!(mapped.message, "catalog name must not be empty");
        assert!(mapped.details.is_empty());
        assert!(!mapped.is_retryable());
    }
}
