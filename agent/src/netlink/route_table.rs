//! Route tables above 255: they only fit in the RTA_TABLE attribute, and the one-byte table of
//! the header then holds a placeholder. Read and written here only.

use netlink_packet_route::route::{RouteAttribute, RouteHeader, RouteMessage};

/// The table `route` is in.
pub fn table_of(route: &RouteMessage) -> u32 {
    route
        .attributes
        .iter()
        .find_map(|attr| match attr {
            RouteAttribute::Table(table) => Some(*table),
            _ => None,
        })
        .unwrap_or(u32::from(route.header.table))
}

/// Puts `route` in `table`: in the header when it fits there, as `ip route` sends it, else in
/// RTA_TABLE with the header's table unspecified.
pub fn set_table(route: &mut RouteMessage, table: u32) {
    if let Ok(small) = u8::try_from(table) {
        route.header.table = small;
    } else {
        route.header.table = RouteHeader::RT_TABLE_UNSPEC;
        route.attributes.push(RouteAttribute::Table(table));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_round_trip_in_the_header_or_the_attribute() {
        for table in [254, 1000] {
            let mut route = RouteMessage::default();
            set_table(&mut route, table);
            assert_eq!(table_of(&route), table);
        }
        let mut large = RouteMessage::default();
        set_table(&mut large, 1000);
        assert_eq!(large.header.table, RouteHeader::RT_TABLE_UNSPEC);
    }
}
