//! RFC 7306 Immediate Data parser: never panics; takes exactly 8 octets
//! (RFC 7306 §6), which re-emit unchanged and parse back equal; the verbs
//! 32-bit immediate is the first four (as iw_cxgb4 places it).
#![no_main]
use iwarp_proto::wire::rdmap::IMMEDIATE_DATA_LEN;
use iwarp_proto::wire::ImmediateData;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(d) = ImmediateData::parse(data) else {
        assert_ne!(data.len(), IMMEDIATE_DATA_LEN, "8 octets refused");
        return;
    };
    assert_eq!(data.len(), IMMEDIATE_DATA_LEN);
    let mut buf = [0u8; IMMEDIATE_DATA_LEN];
    assert_eq!(d.emit(&mut buf).expect("fits"), IMMEDIATE_DATA_LEN);
    assert_eq!(&buf[..], data);
    assert_eq!(
        ImmediateData::parse(&buf).expect("re-emitted body parses"),
        d
    );
    assert_eq!(d.imm32().to_be_bytes(), data[..4]);
    assert!(d.emit(&mut buf[..IMMEDIATE_DATA_LEN - 1]).is_err());
});
